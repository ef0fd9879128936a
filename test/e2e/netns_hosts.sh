# shellcheck shell=bash disable=SC2034  # HOSTS_REASON, HOSTS_SUBNET...: set for the callers
# Two "hosts" on one machine for multi-node runs of the trainer: sourced, not run (by
# test/e2e/test_multihost.sh and scripts/bench_comm.sh). Each host is a network namespace
# of its own (names unique to this shell: nh<pid>a, nh<pid>b), joined by a veth pair to a
# bridge in the root namespace on a private /24 chosen not to clash with any address or
# route here; the root namespace has .1 on the bridge (mpirun's daemon is reached there),
# the hosts .11 and .12. MTU 65000 on the veths and the bridge, so the TCP/IP headers are
# well under 1% of what crosses them; IPv6 off on them, so nothing but our traffic does.
# The namespaces have only their own loopback and their veth: what one host sends another
# can only go over the veths.
#
# mpirun (in the root namespace) starts its daemon on each host through a launcher agent
# (`--mca plm_rsh_agent`, called as AGENT HOST COMMAND...), a script written into the
# caller's $tmp that runs COMMAND in HOST's namespace under `unshare --uts` with its own
# hostname: the two namespaces share /dev/shm and /tmp, and Open MPI names its shared-memory
# segments and session directories by hostname, so with one hostname the two "nodes"
# would collide (vader segfaults). With two, MPI sees two nodes (MPI_COMM_TYPE_SHARED
# splits them apart).
#
#   hosts_up             make them; non-zero with the reason in $HOSTS_REASON (and on
#                        stderr) when this machine cannot (no root, no `ip`, no namespaces);
#                        sets a trap so that hosts_down runs on every exit (EXIT INT TERM),
#                        before the caller's own EXIT trap
#   hosts_down           remove them (kills what still runs inside them); idempotent
#   hosts_mpirun N ARGS  mpirun of 2 x N ranks: 0..N-1 on host A, N..2N-1 on host B
#   hosts_link_bytes     the bytes the two hosts sent out (their veth ends' tx_bytes, summed)
#   $HOSTS_SUBNET        the /24 (CIDR), for callers' checks
#
# Needs $tmp (a directory of the caller's, removed by it) for the agent script. Works
# under `set -euo pipefail` as well as without.

HOSTS_NAME=nh$$
HOSTS_NS_A=${HOSTS_NAME}a HOSTS_NS_B=${HOSTS_NAME}b
HOSTS_BR=${HOSTS_NAME}br
HOSTS_SUBNET="" HOSTS_PREFIX="" HOSTS_REASON="" HOSTS_AGENT="" HOSTS_IS_UP=0
HOSTS_IF=veth0      # the namespace end of each host's veth pair, inside its namespace

# hosts_fail REASON: say why and undo what was made (the caller returns 1)
hosts_fail() { HOSTS_REASON=$1; echo "netns_hosts: $1" >&2; hosts_down; }

# a /24 under 10.0.0.0/8 from this shell's pid, the first that nothing here touches: no
# address or route inside it, no route but the default one covering it (any table)
hosts_pick_subnet() {
    local inside i a b
    inside=$( { ip -4 -o addr show; ip -4 route show table all; } 2>/dev/null)
    for ((i = 0; i < 64; i++)); do
        a=$((160 + ($$ + i) % 64)); b=$(( ($$ / 64 + i * 37) % 256 ))
        if ! grep -qE "(^|[^0-9])10\.$a\.$b\.[0-9]" <<< "$inside" \
           && ! ip -4 route show table all match "10.$a.$b.0/24" 2>/dev/null | grep -qv default; then
            HOSTS_SUBNET=10.$a.$b.0/24; HOSTS_PREFIX=10.$a.$b; return 0
        fi
    done
    return 1
}

hosts_up() {
    HOSTS_REASON=""
    [ "$(id -u)" = 0 ] || { hosts_fail "not root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)"; return 1; }
    local c
    for c in ip unshare hostname sysctl timeout mpirun; do
        command -v "$c" > /dev/null || { hosts_fail "no '$c' command"; return 1; }
    done
    if [ -z "${tmp:-}" ] || [ ! -d "$tmp" ]; then hosts_fail "no \$tmp directory for the launcher agent"; return 1; fi
    hosts_pick_subnet || { hosts_fail "no free 10.x.y.0/24 subnet found"; return 1; }

    # hosts_down on every exit, then the caller's own EXIT trap (lib.sh's removes $tmp)
    local prev
    prev=$(trap -p EXIT)
    prev=${prev#trap -- \'}; prev=${prev%\' EXIT}
    prev=${prev//\'\\\'\'/\'}
    # shellcheck disable=SC2064
    trap "hosts_down; $prev" EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    HOSTS_IS_UP=1

    ip netns add "$HOSTS_NS_A" 2> "$tmp/hosts_err" \
        || { hosts_fail "cannot create a network namespace: $(head -1 "$tmp/hosts_err")"; return 1; }
    ip netns add "$HOSTS_NS_B" 2> "$tmp/hosts_err" \
        || { hosts_fail "cannot create a network namespace: $(head -1 "$tmp/hosts_err")"; return 1; }
    {
        ip link add "$HOSTS_BR" type bridge &&
        ip link set "$HOSTS_BR" mtu 65000 &&
        sysctl -qw "net.ipv6.conf.$HOSTS_BR.disable_ipv6=1" &&
        ip addr add "$HOSTS_PREFIX.1/24" dev "$HOSTS_BR" &&
        ip link set "$HOSTS_BR" up
    } 2> "$tmp/hosts_err" || { hosts_fail "cannot make the bridge: $(head -1 "$tmp/hosts_err")"; return 1; }
    local ns addr end
    for ns in "$HOSTS_NS_A" "$HOSTS_NS_B"; do
        addr=$(hosts_addr "$ns"); end=${ns}v    # the root end: the namespace's name and v
        {
            ip link add "$end" mtu 65000 type veth peer name "$HOSTS_IF" mtu 65000 netns "$ns" &&
            ip link set "$end" master "$HOSTS_BR" &&
            sysctl -qw "net.ipv6.conf.$end.disable_ipv6=1" &&
            ip link set "$end" up &&
            ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 &&
            ip netns exec "$ns" sysctl -qw net.ipv6.conf.default.disable_ipv6=1 &&
            ip -n "$ns" addr add "$addr/24" dev "$HOSTS_IF" &&
            ip -n "$ns" link set "$HOSTS_IF" up &&
            ip -n "$ns" link set lo up
        } 2> "$tmp/hosts_err" || { hosts_fail "cannot join $ns to the bridge: $(head -1 "$tmp/hosts_err")"; return 1; }
    done

    # the launcher agent: AGENT HOST COMMAND... runs COMMAND (one shell command line, as
    # ssh would run it) in HOST's namespace, with the namespace's name as the hostname
    HOSTS_AGENT=$tmp/netns_agent
    cat > "$HOSTS_AGENT" <<EOF
#!/bin/sh
# Open MPI's launcher agent for test/e2e/netns_hosts.sh: AGENT HOST COMMAND...
host=\$1; shift
case \$host in
    $(hosts_addr "$HOSTS_NS_A")) ns=$HOSTS_NS_A ;;
    $(hosts_addr "$HOSTS_NS_B")) ns=$HOSTS_NS_B ;;
    *) echo "netns agent: no namespace for host \$host" >&2; exit 255 ;;
esac
exec ip netns exec "\$ns" unshare --uts /bin/sh -c "hostname \$ns && \$*"
EOF
    chmod +x "$HOSTS_AGENT"

    # host A reaches the root namespace and host B (bash's /dev/tcp: no ping here): a
    # connection, or one refused, is an answer; a timeout or no route is not
    local to
    for to in "$HOSTS_PREFIX.1" "$(hosts_addr "$HOSTS_NS_B")"; do
        if ! ip netns exec "$HOSTS_NS_A" timeout 5 bash -c "exec 3<> /dev/tcp/$to/9" 2> "$tmp/hosts_err" \
           && ! grep -q "Connection refused" "$tmp/hosts_err"; then
            hosts_fail "host A cannot reach $to: $(head -1 "$tmp/hosts_err")"; return 1
        fi
    done
    return 0
}

# hosts_addr NS: the host's address
hosts_addr() { if [ "$1" = "$HOSTS_NS_A" ]; then echo "$HOSTS_PREFIX.11"; else echo "$HOSTS_PREFIX.12"; fi; }

hosts_down() {
    [ "$HOSTS_IS_UP" = 1 ] || return 0
    local ns p
    for ns in "$HOSTS_NS_A" "$HOSTS_NS_B"; do
        # what still runs there (daemons and ranks of an interrupted mpirun): started by us
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
        ip netns delete "$ns" 2>/dev/null || true
        ip link delete "${ns}v" 2>/dev/null || true   # gone with its peer already, unless a process held the namespace
    done
    ip link delete "$HOSTS_BR" 2>/dev/null || true
    HOSTS_IS_UP=0
    return 0
}

# hosts_mpirun N ARGS...: 2 x N ranks, node-major (ranks 0..N-1 on host A), with Open MPI's
# control (oob) and data (btl tcp) traffic on the test subnet and shared memory (vader)
# inside each host. Its stdin is /dev/null: mpirun forwards stdin to rank 0, and would
# eat the rest of a caller's `while read` loop
hosts_mpirun() {
    local n=$1; shift
    mpirun --allow-run-as-root --oversubscribe \
        --host "$(hosts_addr "$HOSTS_NS_A"):$n,$(hosts_addr "$HOSTS_NS_B"):$n" -np $((2 * n)) --map-by slot \
        --mca plm_rsh_agent "$HOSTS_AGENT" --mca plm_rsh_no_tree_spawn 1 \
        --mca oob_tcp_if_include "$HOSTS_SUBNET" --mca btl_tcp_if_include "$HOSTS_SUBNET" --mca btl tcp,self,vader \
        "$@" < /dev/null
}

# hosts_link_bytes: the bytes both hosts have sent out so far (read before and after a run)
hosts_link_bytes() {
    local a b
    a=$(ip netns exec "$HOSTS_NS_A" cat "/sys/class/net/$HOSTS_IF/statistics/tx_bytes") || return 1
    b=$(ip netns exec "$HOSTS_NS_B" cat "/sys/class/net/$HOSTS_IF/statistics/tx_bytes") || return 1
    echo $((a + b))
}
