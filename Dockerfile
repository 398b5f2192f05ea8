# Builds every binary of the alert outbox in one image (decider, outboxctl, and the ones
# later services use); docker-compose.yml picks the command per service.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --bins \
 && mkdir /out \
 && find target/release -maxdepth 1 -type f -executable -exec cp {} /out/ \;

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/ /usr/local/bin/
USER nobody
ENV LOG_FORMAT=json
