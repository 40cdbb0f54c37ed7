# capsule itself, as a container image.
#
# Two ways to build it:
#   online (a registry is reachable), the default target — builds from source with npm:
#     docker build -t capsule .
#   offline (no registry; what CI here can do) — packages the host's `npm run build` output on
#   capsule's own locally built Node image:
#     npm run build && node scripts/build-images.mjs capsule/node:1
#     docker build --target prebuilt --build-arg BASE_IMAGE=capsule/node:1 -t capsule .
#
# Running docker capabilities from inside needs the engine: -v /var/run/docker.sock:/var/run/docker.sock
# (that socket is root on the host; the container running capsule is then NOT a sandbox itself).

ARG BASE_IMAGE=node:20-bookworm-slim
ARG BUILD_IMAGE=node:20-bookworm-slim

# --- offline: copy what the host built (first, so the legacy builder stops here with --target prebuilt)
FROM ${BASE_IMAGE} AS prebuilt
WORKDIR /opt/capsule
COPY package.json package-lock.json ./
COPY node_modules ./node_modules
COPY dist ./dist
COPY runtimes ./runtimes
COPY profiles ./profiles
COPY capabilities ./capabilities
ENV NODE_ENV=production
# capsule writes .capsule/ (audit log, caches) under the project root: /work must be writable by the non-root user.
USER root
RUN mkdir -p /work && chmod 1777 /work
USER 65534:65534
WORKDIR /work
ENTRYPOINT ["node", "/opt/capsule/dist/cli/main.js"]
CMD ["--help"]

# --- online: build from source
FROM ${BUILD_IMAGE} AS build
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npm run build && npm prune --omit=dev

FROM ${BASE_IMAGE} AS runtime
# bubblewrap confines shell capabilities (it needs user namespaces: without them capsule says so).
RUN apt-get update && apt-get install -y --no-install-recommends bubblewrap && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/capsule
COPY --from=build /src/package.json /src/package-lock.json ./
COPY --from=build /src/node_modules ./node_modules
COPY --from=build /src/dist ./dist
COPY runtimes ./runtimes
COPY profiles ./profiles
COPY capabilities ./capabilities
ENV NODE_ENV=production
# capsule writes .capsule/ (audit log, caches) under the project root: /work must be writable by the non-root user.
USER root
RUN mkdir -p /work && chmod 1777 /work
USER 65534:65534
WORKDIR /work
ENTRYPOINT ["node", "/opt/capsule/dist/cli/main.js"]
CMD ["--help"]
