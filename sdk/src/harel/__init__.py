"""harel: durable Harel statecharts on MongoDB."""

__version__ = "0.1.0"
