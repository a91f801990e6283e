"""The `tsm` command line: the top floor, which nothing else imports.

| module | job |
|---|---|
| `main` | the entry point: parse, configure logging, run the command, map errors to exit statuses |
| `args` | `CliError`, argparse value types, `-q`/`-v`, `--config` (`tsm.toml`), `--kafka` |
| `logs` | the one logging setup; Spark's and librdkafka's levels; the JVM's output to a file |
| `progress` | a progress bar on stderr for long work (tqdm), on a terminal only |
| `replay` | `tsm replay` |
| `kafka` | `tsm broker`, `tsm topics`, `tsm produce`, `tsm consume` |
| `run` | `tsm run` |
| `demo` | `tsm demo` (the scenario's replay itself is `streaming.demo`) |
| `bench` | `tsm gen`, `tsm bench` |
"""
