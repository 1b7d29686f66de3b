"""The bodies of the `spc` commands that use a plan: run, check, bench, inspect, emit-py."""
