"""Small, complete environments with frozen policies that fail in systematic ways.

They exist to show (and test) the harness optimizer end to end: ``support_desk`` (a policy that
refunds before it looks the order up) and ``coding_shell`` (a policy that edits before running
the tests and cleans up outside its workspace). The optimizer itself never imports them — the
layer test keeps this package below it — so nothing it learns can come from knowing them.
"""
