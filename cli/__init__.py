"""The fstrace command (`python3 -m cli`): commands.py parses the command line and is the only module that reads
its namespace (the rooms below take plain values or small dataclasses: runner.Tracing, serve.Settings);
runner.py runs a workload under the collector; bench.py, advise.py and serve.py are the engines of those
commands; storage.py the storage profiles; signals.py, leftovers.py, devices.py, cgroups.py and directories.py
what a command does to the machine and undoes again."""
