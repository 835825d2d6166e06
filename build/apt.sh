# Sourced by build/tools.sh and build/docker.sh, which install what they miss from Debian's packages:
# `apt_install WHO [APT-GET OPTIONS] PACKAGE...` says on stderr what WHO installs, then runs apt-get as root, or
# through sudo.
apt_install() {
	local who=$1 sudo="" packages=()
	shift
	for a in "$@"; do [[ $a == -* ]] || packages+=("$a"); done
	echo "$who: installing ${packages[*]}" >&2
	[ "$(id -u)" = 0 ] || sudo=sudo
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}
