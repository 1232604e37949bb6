"""The project's tools that are not the fstrace command (bench_overhead, vmtest, completion): each runs as a
module from the checkout's root, `python3 -m scripts.NAME`, so that it imports the packages beside it."""
