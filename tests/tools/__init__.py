"""Command-line tools the test suite runs, pinned in `package.json` / `package-lock.json` and installed into
`tests/tools/node_modules` by `make venv` (`npm ci`)."""
