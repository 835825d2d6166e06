# Our CoreDNS: stock CoreDNS with the multicluster plugin.
# Build from the repository root: docker build -f build/images/coredns.Dockerfile -t coredns .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Static, reproducible binary: no cgo, no local paths, no symbol table.
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/coredns ./cmd/coredns

# Port 53 as a non-root user: give the binary the one capability it needs, as upstream CoreDNS images do.
RUN apt-get update && apt-get install -y --no-install-recommends libcap2-bin && setcap cap_net_bind_service=+ep /out/coredns

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/coredns /coredns
USER 65532:65532
EXPOSE 53/udp 53/tcp 9153/tcp
ENTRYPOINT ["/coredns"]
