package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"

	"ilnp/internal/budget"
	"ilnp/internal/datapath"
	"ilnp/internal/encap"
	"ilnp/internal/pathprobe"
	"ilnp/internal/paths"
	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

// Paths that drop Destination Options (issue 24 item 2): the loop feeds internal/pathprobe the
// datapath's per pair counters and states on every path poll, sends the probes it asks for,
// turns on the pairs it finds dropping the nonce header (bpf/lib/encap6.h) and gives every
// correspondent with a pair on the smaller route MTU. The peer's side needs nothing from here:
// its datapath learns the pair from our nonce-verified encapsulated packets.

// Encap6EventKind is the timeline kind of a pair turned over to ILNPv6 in UDP/IPv6 here.
const Encap6EventKind timeline.Kind = "path_encap6"

// encap6Overhead is what ILNPv6 in UDP/IPv6 adds in front of the packet: IPv6 40 + UDP 8.
const encap6Overhead = 48

// encap6Monitor is the stage's state; loop-owned.
type encap6Monitor struct {
	stage *pathprobe.Stage
	sock  *echoSocket
	// exthdr sends every echo request with a Destination Options header (exthdrProbeOption).
	exthdr  *echoSocket
	answers chan echoAnswer
	seq     uint16
	sent    map[uint16]sentEncap6
	// out is the probes' queue to their sender (sendProbes): a mass move at a correspondent
	// asks for thousands at once, two system calls each (issue 28: 3,361 in one poll's steps
	// at the end of a mass move of 100,000, the loop's longest stall).
	out chan encap6Probe
	// probes is the probe budget (encap6ProbesPerSecond).
	probes budget.Bucket
	// samples is a step's samples' buffer, kept from step to step.
	samples []pathprobe.Sample
}

// encap6Probe is one probe for the sender.
type encap6Probe struct {
	sock     *echoSocket
	src, dst netip.Addr
	mark     uint32
	seq      uint16
	data     []byte
}

// encap6ProbesPerSecond caps the probes of all pairs together (a token bucket holding one
// second's worth): a mass move at a correspondent whose correspondents then pause leaves every
// moved pair unanswered, and each asked for a check of two probes at once (issue 28: 3,361 in
// the steps of one poll). A check left out ends unanswered and is backed off (pathprobe).
const encap6ProbesPerSecond = 1000

// budget takes n probes from the bucket, or none if it holds fewer.
func (m *encap6Monitor) budget(n int, now time.Time) bool {
	return m.probes.Take(float64(n), encap6ProbesPerSecond, encap6ProbesPerSecond, now)
}

// encap6ProbeQueue is how many probes may wait for the sender.
const encap6ProbeQueue = 4096

type sentEncap6 struct {
	key   paths.Key
	probe pathprobe.Probe
	id    uint16 // the socket's echo identifier
	at    time.Time
}

// plainProbePayload marks the plain probe's echo data (no datapath meaning).
var plainProbePayload = []byte("ILNPplain-probe")

// exthdrProbeOption is the Destination Options header of the exthdr probe: one option of
// RFC 4727's experimental type 0x1E (action bits 00: a node that does not know it skips it, so
// the peer's kernel answers) with 4 bytes of data. The kernel fills in the Next Header.
var exthdrProbeOption = []byte{0, 0, 0x1e, 4, 0, 0, 0, 0}

// startEncap6 opens the probe sockets and starts their readers; nil (logged) when it cannot.
func (n *Node) startEncap6(ctx context.Context) *encap6Monitor {
	m, err := openEncap6(ctx)
	if err != nil {
		n.log.Warn("encap6 detection off", "err", err)
		return nil
	}
	go n.sendEncap6Probes(ctx, m)
	return m
}

// sendEncap6Probes sends the queued probes until ctx ends.
func (n *Node) sendEncap6Probes(ctx context.Context, m *encap6Monitor) {
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-m.out:
			n.sentEncap6Probe(p, sendEcho(p.sock, p.src, p.dst, p.mark, p.seq, p.data))
		}
	}
}

// sentEncap6Probe counts a probe sent or not.
func (n *Node) sentEncap6Probe(p encap6Probe, err error) {
	if err != nil {
		n.count("encap6_probe_errors")
		n.log.Debug("encap6 probe", "src", p.src, "dst", p.dst, "err", err)
		return
	}
	n.count("encap6_probes_sent")
}

func openEncap6(ctx context.Context) (*encap6Monitor, error) {
	st, err := pathprobe.New(pathprobe.Config{})
	if err != nil {
		return nil, err
	}
	plain, err := openEchoSocket("encap6 probes")
	if err != nil {
		return nil, err
	}
	exthdr, err := openEchoSocket("encap6 exthdr probes")
	if err != nil {
		plain.Close()
		return nil, err
	}
	rc, err := exthdr.conn.SyscallConn()
	var serr error
	if err == nil {
		err = rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.IPPROTO_IPV6, unix.IPV6_DSTOPTS, string(exthdrProbeOption))
		})
	}
	if err = errors.Join(err, serr); err != nil {
		plain.Close()
		exthdr.Close()
		return nil, fmt.Errorf("encap6 exthdr probes: IPV6_DSTOPTS: %w", err)
	}
	m := &encap6Monitor{stage: st, sock: plain, exthdr: exthdr, answers: make(chan echoAnswer, 64), sent: map[uint16]sentEncap6{},
		out: make(chan encap6Probe, encap6ProbeQueue)}
	go (&probeSocket{plain}).read(ctx, m.answers)
	go (&probeSocket{exthdr}).read(ctx, m.answers)
	go func() { <-ctx.Done(); plain.Close(); exthdr.Close() }()
	return m, nil
}

// encap6Read is the datapath's encap6 pairs, read off the loop with a path poll's counters.
type encap6Read struct {
	state map[datapath.PathKey]datapath.Encap6Pair
	on    map[wire.NID]bool // peers with a pair on ILNPv6 in UDP/IPv6
}

// readEncap6 reads the datapath's encap6 pairs (off the loop); nil on an error (logged): the
// poll then leaves encap6 alone.
func (n *Node) readEncap6() *encap6Read {
	pairs, err := n.dp.Encap6Pairs()
	if err != nil {
		n.log.Warn("encap6 pairs", "err", err)
		return nil
	}
	r := &encap6Read{state: make(map[datapath.PathKey]datapath.Encap6Pair, len(pairs)), on: map[wire.NID]bool{}}
	for _, p := range pairs {
		r.state[p.Key] = p
		if p.On {
			r.on[p.Key.RemoteNID] = true
		}
	}
	return r
}

// drainEncap6 takes in the probe answers already read.
func drainEncap6(m *encap6Monitor) {
	for drained := false; !drained; {
		select {
		case a := <-m.answers:
			if s, ok := m.sent[a.seq]; ok && a.id == s.id {
				delete(m.sent, a.seq)
				m.stage.Answered(s.key, s.probe, s.at, a.at)
			}
		default:
			drained = true
		}
	}
}

// encap6Session is a peer's session as a step of a path poll found it (pollPeers): its
// binding's session view; ok: it has one.
type encap6Session struct {
	local, remote wire.ILV
	ok            bool
}

// stepEncap6 is the stage's share of one step of a path poll on the loop, over the same
// peers' counters (each peer's all; sess[i] is peers[i]'s session): a poll at 100,000 sessions
// took it in one go, 213 ms of the loop (issue 28). It looks nothing up per pair: a peer's
// session comes from the step (a second binding per pair was three quarters of its CPU).
func (n *Node) stepEncap6(pm *pathMonitor, m *encap6Monitor, r *encap6Read, stats []datapath.PathStats, peers []peerStats, sess []encap6Session, at func(uint64) time.Time, now time.Time) {
	if m == nil || r == nil {
		return
	}
	drainEncap6(m)
	usable := map[wire.L64]bool{}
	for _, l := range n.cache.Locals() {
		if l.State.Usable() {
			usable[l.Locator] = true
		}
	}
	samples := m.samples[:0]
	for i, ps := range peers {
		if !sess[i].ok {
			continue
		}
		for _, st := range stats[ps.from:ps.to] {
			k := st.Key
			if k.LocalNID != sess[i].local.NID || encap.IsL32(k.Local) || encap.IsL32(k.Remote) || !usable[k.Local] {
				continue
			}
			var e datapath.Encap6Pair
			if len(r.state) > 0 {
				e = r.state[k]
			}
			samples = append(samples, pathprobe.Sample{
				Key:        paths.Key{Peer: k.RemoteNID, Local: k.Local, Remote: k.Remote},
				Unanswered: st.Unanswered, FirstUnanswered: at(st.FirstUnansweredTxNs), LastTx: at(st.LastTxNs),
				On: e.On, ByPeer: e.ByPeer,
			})
		}
	}
	m.samples = samples[:0] // the buffer, for the next step
	acts := m.stage.StepSome(samples, now)
	sessOf := func(peer wire.NID) encap6Session {
		i, ok := slices.BinarySearchFunc(peers, peer, func(ps peerStats, p wire.NID) int { return cmp.Compare(ps.peer, p) })
		if !ok {
			return encap6Session{}
		}
		return sess[i]
	}
	for i := 0; i < len(acts); i++ {
		a := acts[i]
		s := sessOf(a.Key.Peer)
		if a.Encapsulate {
			n.encap6On(s.local, a.Key, now)
			r.on[a.Key.Peer] = true
			continue
		}
		// A check's plain and exthdr probes go together or not at all: a check without
		// its plain probe ends unanswered (no-answer, backed off), never as a pair that
		// drops the header.
		j := i + 1
		for j < len(acts) && acts[j].Key == a.Key && !acts[j].Encapsulate {
			j++
		}
		probes := acts[i:j]
		i = j - 1
		if !m.budget(len(probes), now) {
			for range probes {
				n.count("encap6_probes_withheld")
			}
			continue
		}
		for _, a := range probes {
			n.sendEncap6Probe(pm, m, s, a, now)
		}
	}
	for _, ps := range peers {
		if r.on[ps.peer] || n.host.encap6[ps.peer] {
			n.setEncap6Route(ps.peer, r.on[ps.peer])
		}
	}
}

// endEncap6 ends a poll's encap6 stage: the pairs it did not see are forgotten, and the
// correspondents it did not step (polled says which it did) get their route MTU as the datapath's
// pairs say.
func (n *Node) endEncap6(m *encap6Monitor, r *encap6Read, polled func(wire.NID) bool, now time.Time) {
	if m == nil || r == nil {
		return
	}
	m.stage.EndPass()
	for nid := range n.host.encap6 {
		if !polled(nid) && !r.on[nid] {
			n.setEncap6Route(nid, false)
		}
	}
	for nid := range r.on {
		if !polled(nid) {
			n.setEncap6Route(nid, true)
		}
	}
	for seq, s := range m.sent {
		if now.Sub(s.at) > 10*time.Second {
			delete(m.sent, seq)
		}
	}
}

func (n *Node) setEncap6Route(nid wire.NID, on bool) {
	if err := n.host.setEncap6(nid, on); err != nil {
		n.log.Warn("encap6 route MTU", "peer", nid, "err", err)
	}
}

// encap6On turns the pair over and, when an LU waits for its ACK, sends it again at once: the
// copies so far were lost to the path (lu.Engine.Resend).
func (n *Node) encap6On(local wire.ILV, k paths.Key, now time.Time) {
	if err := n.dp.SetEncap6Pair(datapath.PathKey{LocalNID: local.NID, RemoteNID: k.Peer, Local: k.Local, Remote: k.Remote}, true); err != nil {
		n.count("encap6_errors")
		n.log.Warn("encap6 on", "pair", k, "err", err)
		return
	}
	n.count("encap6_pairs_on")
	n.emit(timeline.Event{Kind: Encap6EventKind, Peer: k.Peer.String(), Locator: k.Local.String(),
		Detail: fmt.Sprintf("%v->%v native unanswered, plain answered: ILNPv6 in UDP/IPv6", k.Local, k.Remote)})
	n.setEncap6Route(k.Peer, true)
	if p, ok := n.engine.Outstanding(k.Peer); ok && p.Message.Source.Locator == k.Local {
		n.perform(n.engine.Resend(k.Peer, now))
	}
}

// sendEncap6Probe sends a plain or exthdr probe between the pair's wire addresses (no nonce:
// the datapaths pass it as not the session's), or a native one through the session on the
// pair's probe slot, asking for a native answer.
func (n *Node) sendEncap6Probe(pm *pathMonitor, m *encap6Monitor, s encap6Session, a pathprobe.Action, now time.Time) {
	m.seq++
	p := encap6Probe{sock: m.sock, seq: m.seq}
	switch a.Probe {
	case pathprobe.Plain, pathprobe.Exthdr:
		p.src = wire.ILV{Locator: a.Key.Local, NID: s.local.NID}.Addr()
		p.dst = wire.ILV{Locator: a.Key.Remote, NID: a.Key.Peer}.Addr()
		if a.Probe == pathprobe.Exthdr {
			p.sock = m.exthdr
		}
		p.data = plainProbePayload
	case pathprobe.Native:
		slot := pm.slot(a.Key)
		if err := n.dp.SetProbePair(slot, datapath.PathKey{LocalNID: s.local.NID, RemoteNID: a.Key.Peer, Local: a.Key.Local, Remote: a.Key.Remote}); err != nil {
			n.sentEncap6Probe(p, err)
			return
		}
		p.src, p.dst, p.mark = s.local.Addr(), s.remote.Addr(), datapath.ProbeMark|slot
		p.data = append(probePayload(a.Key.Local, a.Key.Remote), 'N')
	}
	m.sent[m.seq] = sentEncap6{key: a.Key, probe: a.Probe, id: p.sock.id, at: now}
	// Only the sender writes on the sockets (a probe's mark is a socket option, set before
	// each write): a full queue waits for it, a while.
	select {
	case m.out <- p:
	case <-time.After(encap6QueueWait):
		n.sentEncap6Probe(p, errors.New("probe queue full"))
	}
}

// encap6QueueWait is how long the loop waits for room in a full probe queue (the sender empties
// it in some tens of milliseconds).
const encap6QueueWait = 100 * time.Millisecond

// sendEcho sends one echo request from src to dst with a socket mark (0: none).
func sendEcho(s *echoSocket, src, dst netip.Addr, mark uint32, seq uint16, data []byte) error {
	msg, err := (&icmp.Message{Type: ipv6.ICMPTypeEchoRequest, Body: &icmp.Echo{ID: int(s.id), Seq: int(seq), Data: data}}).Marshal(nil)
	if err != nil {
		return fmt.Errorf("encode echo: %w", err)
	}
	rc, err := s.conn.SyscallConn()
	if err != nil {
		return fmt.Errorf("echo socket: %w", err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, int(mark)) }); err != nil {
		return fmt.Errorf("echo socket: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("echo mark: %w", serr)
	}
	cm := &ipv6.ControlMessage{Src: src.AsSlice(), HopLimit: 64}
	if _, err := s.pc.WriteTo(msg, cm, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
		return fmt.Errorf("echo %s -> %s: %w", src, dst, err)
	}
	return nil
}

// encap6Rows are the datapath's encap6 pairs by path key, for the show commands.
func (n *Node) encap6Rows() map[datapath.PathKey]datapath.Encap6Pair {
	pairs, err := n.dp.Encap6Pairs()
	if err != nil {
		n.log.Debug("encap6 pairs", "err", err)
		return nil
	}
	out := make(map[datapath.PathKey]datapath.Encap6Pair, len(pairs))
	for _, p := range pairs {
		out[p.Key] = p
	}
	return out
}

// encap6Label is a pair's encapsulation as the show commands print it.
func encap6Label(p datapath.Encap6Pair) string {
	if !p.On {
		return ""
	}
	if p.ByPeer {
		return "ipv6-udp(peer)"
	}
	return "ipv6-udp"
}
