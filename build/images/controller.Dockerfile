# The mcs-controller, as a static binary in an empty image, with kubectl-mcs beside it: `kubectl mcs diagnose
# --in-cluster` runs its DNS probe pod from this image (kubectl-mcs dns-probe), at the plugin's own version.
# Built by build/images/build.sh (make images), which builds both binaries with the host's Go (CGO_ENABLED=0,
# -trimpath, -ldflags='-s -w') into the build context. Nothing is pulled.
FROM scratch
ARG VERSION=dev
ARG REVISION=unknown
ARG SOURCE=https://github.com/vksfleet/fleet
LABEL org.opencontainers.image.title="mcs-controller" \
      org.opencontainers.image.description="Kubernetes Multi-Cluster Services controller: exports to the broker, imports from it" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY mcs-controller /mcs-controller
COPY kubectl-mcs /kubectl-mcs
USER 65532:65532
EXPOSE 8080/tcp 8081/tcp
ENTRYPOINT ["/mcs-controller"]
