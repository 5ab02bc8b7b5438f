"""harel-stack: bring up, inspect, smoke-check and tear down the local compose stack."""
