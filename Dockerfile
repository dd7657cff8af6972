# claude-host in a container: the distribution binary, the pinned Claude Code CLI, a non-root
# user. Build and run (README.md, *Docker*):
#   docker build -t claude-host .
#   docker run --rm claude-host --upstream replay:/usr/share/claude-host/hello.replay.jsonl claude -p "say hello"

# 1. The binary, with the toolchain the workspace is tested on (rust-version in Cargo.toml).
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --locked --profile dist -p claude-host --features full \
 && cp target/dist/claude-host /claude-host

# 2. The pinned Claude Code CLI, installed by claude-host itself (npm is needed only here).
FROM node:22-bookworm-slim AS cli
COPY --from=build /claude-host /usr/local/bin/claude-host
RUN mkdir -p /opt/claude-host \
 && claude-host --home /opt/claude-host install-cli > /opt/claude-host/cli-path

# 3. What runs: no compiler, no npm.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates git \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 10001 --shell /bin/bash claude
COPY --from=build /claude-host /usr/local/bin/claude-host
COPY --from=cli /opt/claude-host/cli /opt/claude-host/cli
COPY --from=cli /opt/claude-host/cli-path /opt/claude-host/cli-path
# `claude` on PATH is the pinned CLI (its path differs by architecture), so claude-host finds it
# and never installs one at run time.
RUN ln -s "$(cat /opt/claude-host/cli-path)" /usr/local/bin/claude \
 && claude --version
COPY examples/hello.replay.jsonl /usr/share/claude-host/hello.replay.jsonl
# Data (credentials, sessions, logs) goes to the user's XDG data folder: a volume keeps it.
USER claude
WORKDIR /home/claude/work
VOLUME ["/home/claude/.local/share/claude-host", "/home/claude/.claude"]
ENTRYPOINT ["claude-host"]
CMD ["--help"]
