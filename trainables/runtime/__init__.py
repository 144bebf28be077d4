"""What every layer shares to run a command: one declared check per setting, command-line
options and refusals, the Ray driver, file locks, fault injection. Imports no other package."""
