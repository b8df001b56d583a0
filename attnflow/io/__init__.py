"""Files and the terminal: text input, atomic writes, the console, and reading run folders and
their checkpoints. The lowest layer: it imports nothing else of attnflow."""
