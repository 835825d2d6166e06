# Our CoreDNS: stock CoreDNS with the multicluster plugin, as a static binary in an empty image.
# Built by build/images/build.sh (make images), which builds the binary with the host's Go (CGO_ENABLED=0,
# -trimpath, -ldflags='-s -w') and gives it CAP_NET_BIND_SERVICE as a file capability, then packs it into
# coredns.tar: COPY would drop the capability, ADD of a tar applies it. Nothing is pulled.
FROM scratch
ARG VERSION=dev
ARG REVISION=unknown
ARG SOURCE=https://github.com/vksfleet/fleet
LABEL org.opencontainers.image.title="coredns" \
      org.opencontainers.image.description="CoreDNS with the multicluster plugin: cluster.local and clusterset.local (KEP-1645)" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"
# Port 53 as a non-root user: the binary's file capability, as in upstream CoreDNS images.
ADD coredns.tar /
USER 65532:65532
EXPOSE 53/udp 53/tcp 9153/tcp
ENTRYPOINT ["/coredns"]
