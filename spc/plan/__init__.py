"""The plan: the contract between the compiler, which writes it, and the runtime, which reads it."""
