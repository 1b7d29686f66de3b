"""The IR: typed values, nodes, graphs, their text form and verifier."""
