# The mcs-controller.
# Build from the repository root: docker build -f build/images/controller.Dockerfile -t mcs-controller .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Static, reproducible binary: no cgo, no local paths, no symbol table.
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/mcs-controller ./cmd/controller


FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/mcs-controller /mcs-controller
USER 65532:65532
EXPOSE 8080/tcp 8081/tcp
ENTRYPOINT ["/mcs-controller"]
