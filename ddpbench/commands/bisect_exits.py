"""`ddpbench bisect`'s exit codes, apart from the command and its text: every command's parser is
built at start-up, and the text's imports (the A/B runner, scipy) would slow down every command."""

EXIT_FOUND, EXIT_NONE, EXIT_CANNOT_TELL, EXIT_MACHINE = 0, 1, 3, 4
