"""One module per `genret` command, named after it: flags, the resolved config, one library call."""
