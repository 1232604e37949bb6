"""The fstrace command (`python3 -m cli`): commands.py parses the command line; runner.py runs a workload under
the collector; bench.py, advise.py and serve.py are the commands of those names; storage.py the storage
profiles; signals.py, leftovers.py, devices.py, cgroups.py and directories.py what a command does to the machine
and undoes again."""
