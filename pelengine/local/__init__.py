"""The local runner: the job in one process, no JVM (Arrow tables in, the engines, delta-rs out)."""
