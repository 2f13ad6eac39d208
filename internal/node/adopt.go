package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"ilnp/internal/bpffs"
	"ilnp/internal/config"
	"ilnp/internal/datapath"
	"ilnp/internal/encap"
	"ilnp/internal/ilcc"
	"ilnp/internal/routewrite"
	"ilnp/internal/state"
	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

// Restart and crash: SIGTERM, SIGKILL and a panic all leave the datapath running (pinned maps
// and TCX links, identity addresses, locator addresses, peer routes), so packets keep flowing
// while ilnpd is down. The next ilnpd with the same configuration adopts it: the pinned links
// get the new programs by a link update (datapath/pin.go), the sessions and local locators are
// read back from the maps and checked against the kernel, and what the maps do not hold comes
// from the state file (internal/state), which the loop rewrites whenever it changes. A flush
// (`ilnpd -flush`, `ilnpctl flush`) removes it all.

// continuity is the node's restart and flush state.
type continuity struct {
	nextCheck time.Time // persist checks again no earlier (loop-owned)
	pending   bool      // a check was put off until nextCheck
	// The state file is encoded and written off the loop (persist): snapshots are numbered
	// (stateSeq, loop-owned) and one older than the last written is never written.
	stateSeq    uint64
	writing     atomic.Bool  // a snapshot is being encoded and written
	writerAfter atomic.Int64 // unix ns: no snapshot before then (persistShare of the last write)
	stateMu     sync.Mutex   // guards lastState and lastSeq
	lastState   state.Digest // the SHA-256 of the state file as last written
	lastSeq     uint64       // the snapshot lastState is
	flushing    atomic.Bool  // shutdown removes everything instead of keeping it
	adopted     bool         // setup got through adopt: the state file may be written
	stopMu      sync.Mutex
	stop        context.CancelFunc // ends Run

	// The snapshot is taken on the loop in steps (statesnap.go; loop-owned): snap is the one
	// being taken, nextStep when its next step is due (stepTimer, armed for stepArmed), and
	// stepTurn says that the loop's last turn was such a step, not an event.
	snap      *stateSnapshot
	nextStep  time.Time
	stepTimer *time.Timer
	stepArmed time.Time
	stepTurn  bool
}

func (c *continuity) setStop(stop context.CancelFunc) {
	c.stopMu.Lock()
	c.stop = stop
	c.stopMu.Unlock()
}

// adopt takes over what a previous ilnpd left (setup calls it once the datapath is attached
// and the LU socket open). Locators that went away while the daemon was down are dropped, new
// ones come from discovery as usual, and every correspondent that does not know the current
// locator set gets an LU.
func (n *Node) adopt() error {
	st, err := state.Read(n.cfg.StateDir)
	switch {
	case errors.Is(err, state.ErrNotExist):
	case errors.Is(err, state.ErrVersion):
		return fmt.Errorf("%w: run `ilnpd -flush -config FILE` (ends the sessions it describes) and start again", err)
	case err != nil:
		n.log.Warn("state file unreadable; adopting from the datapath alone (correspondents get an LU)", "err", err)
		st = state.File{}
	}
	if st.NID != 0 && st.NID != n.nid {
		return fmt.Errorf("the pinned datapath in %s belongs to NID %v, this configuration has NID %v: "+
			"run `ilnpd -flush -config FILE` (ends its sessions) and start again", n.cfg.BPFDir(), st.NID, n.nid)
	}
	for _, p := range st.Peers {
		ilvs := make([]wire.RankedILV, 0, len(p.ILVs))
		for _, v := range p.ILVs {
			if ilv, err := wire.ILVFromAddr(v.Addr); err == nil {
				ilvs = append(ilvs, wire.RankedILV{ILV: ilv, Preference: v.Preference})
			}
		}
		n.mu.Lock()
		n.peers[p.Name] = ilvs
		n.mu.Unlock()
	}
	var attached []int
	for idx := range n.ifaces {
		attached = append(attached, idx)
	}
	if gone, err := n.dp.DetachOthers(attached); err != nil || gone > 0 {
		n.log.Info("detached from interfaces no longer configured", "links", gone, "err", err)
	}
	n.adoptEphemeral(st)
	// Identity addresses the last daemon kept on lo: pruned below unless still in use.
	for _, a := range st.Identities {
		if ilv, err := wire.ILVFromAddr(a); err == nil && n.localNID(ilv.NID) {
			n.host.identities[a] = true
		}
	}
	now := time.Now()
	nLocals := n.adoptLocals(st, now)
	if err := n.host.loadRoutes(); err != nil {
		n.log.Warn("peer routes are written again", "err", err)
	}
	defer n.host.forgetRoutes()
	acked := map[wire.NID][]wire.LocatorEntry{}
	for _, c := range st.Correspondents {
		if c.Acked {
			adv := make([]wire.LocatorEntry, 0, len(c.Advertised))
			for _, a := range c.Advertised {
				adv = append(adv, wire.LocatorEntry{Locator: a.Locator, Preference: a.Preference})
			}
			acked[c.NID] = adv
		}
	}
	unverified, err := n.dp.Unverified()
	if err != nil {
		n.log.Warn("unverified locators", "err", err)
	}
	adopted := 0
	// The table is walked, not listed: a million sessions' list took some 280 MB beside the
	// ILCC the walk fills (issue 28).
	if err := n.dp.WalkSessions(func(s datapath.Session) bool {
		if n.adoptSession(s, acked, unverified, now) {
			adopted++
		}
		return true
	}); err != nil {
		return fmt.Errorf("adopt sessions: %w", err)
	}
	if peers, err := n.dp.Peers(); err == nil {
		for _, p := range peers {
			n.routeAdopted(p.Addr)
		}
	}
	for _, a := range st.PeerRoutes {
		n.routeAdopted(a)
	}
	// Correspondents that do not know where the node is now hear it.
	n.apply(n.cache.Resync(now), now)
	n.pruneIdentities()
	n.continuity.adopted = true
	if nLocals > 0 || adopted > 0 || n.dp.Adopted() > 0 {
		n.log.Info("adopted the running datapath", "links", n.dp.Adopted(), "locators", nLocals, "sessions", adopted)
		n.emit(timeline.Event{Kind: "adopted", Detail: fmt.Sprintf("links=%d locators=%d sessions=%d",
			n.dp.Adopted(), nLocals, adopted)})
	}
	return nil
}

// adoptSession takes over one session of the pinned table (adopt); false: not this node's, or
// the ILCC refused it.
func (n *Node) adoptSession(s datapath.Session, acked map[wire.NID][]wire.LocatorEntry, unverified []datapath.Unverified, now time.Time) bool {
	if !n.localNID(s.LocalNID) {
		return false
	}
	if s.LocalLocator != 0 {
		// A soft switch the previous daemon held on the old locator (tcpaware.Pins): this
		// one would never release it, so the session sends from the active locator again.
		if _, err := n.dp.SetSessionsLocal(s.RemoteNID, 0); err != nil {
			n.log.Warn("held soft switch not released", "peer", s.RemoteNID, "err", err)
		}
	}
	if s.Flags&datapath.SessionRemotePinned != 0 {
		// The same on the correspondent's side (tcpaware.RemotePins): the new program's
		// remote_pins map is empty, and the flag goes too.
		if _, err := n.dp.SetSessionsRemote(s.RemoteNID, 0); err != nil {
			n.log.Warn("held soft switch not released", "peer", s.RemoteNID, "err", err)
		}
	}
	remote := make([]ilcc.RemoteLocator, 0, len(s.RemoteLocators))
	for _, r := range s.RemoteLocators {
		remote = append(remote, ilcc.RemoteLocator{Locator: r.Locator, Preference: r.Preference,
			Lifetime: r.Lifetime, State: ilccState(r.State)})
	}
	eff, err := n.cache.AdoptSession(ilcc.AdoptedSession{
		Local:      wire.ILV{Locator: s.LocalView, NID: s.LocalNID},
		Remote:     wire.ILV{Locator: s.RemoteView, NID: s.RemoteNID},
		LocalNonce: s.LocalNonce, RemoteNonce: s.RemoteNonce,
		RemoteLocators: remote, RemoteActive: s.RemoteActive,
		Advertised: acked[s.RemoteNID],
	}, now)
	if err != nil {
		n.log.Warn("pinned session not adopted", "peer", s.RemoteNID, "err", err)
		return false
	}
	if err := n.host.addIdentity(s.LocalAddr()); err != nil {
		n.log.Warn("identity address", "err", err)
	}
	n.routeAdopted(s.RemoteAddr())
	n.apply(eff, now)
	n.lvResumed(s, unverified)
	return true
}

// routeAdopted gives an adopted correspondent its MTU route again (through the active
// locator), so that later moves reroute it.
func (n *Node) routeAdopted(peer netip.Addr) {
	active, ok := n.cache.Active()
	if !ok {
		return
	}
	if err := n.host.routePeer(peer, active.IfIndex, active.Router); err != nil {
		n.log.Warn("peer route", "err", err)
	}
}

// adoptLocals takes the datapath's local locators whose [L64:NID] address is still on its
// interface and that interface is running; the others went away while the daemon was down.
// They enter the ILCC in their old ranking (the state file's, else active first) with the
// address's remaining lifetimes.
func (n *Node) adoptLocals(st state.File, now time.Time) int {
	dpLocals, err := n.dp.LocalLocators()
	if err != nil {
		n.log.Warn("pinned local locators", "err", err)
		return 0
	}
	rank := map[wire.L64]int{}
	for i, l := range st.Locals {
		rank[l.Locator] = i + 1
	}
	order := func(l datapath.LocalLocator) int {
		if r, ok := rank[l.Locator]; ok {
			return r
		}
		return len(rank) + 1 + int(l.State) // active < valid < aged
	}
	slices.SortStableFunc(dpLocals, func(a, b datapath.LocalLocator) int { return order(a) - order(b) })
	formed := map[netip.Addr]bool{}
	for _, a := range st.Formed {
		formed[a.Addr] = true
	}
	adopted := 0
	// Applied once, when all are in: applied one by one, the worst would be active for a
	// moment (routes and the datapath's active locator flipping to it and back, and packets
	// of a session over IPv4 dropped while an IPv6 locator was).
	var all ilcc.Effects
	// Worst first, each a microsecond "newer" than the last: the policy ranks them as before.
	for i := len(dpLocals) - 1; i >= 0; i-- {
		l := dpLocals[i]
		addr := wire.ILV{Locator: l.Locator, NID: n.nid}.Addr()
		router, valid, preferred, ok := n.adoptedLocal(l, addr)
		if !ok {
			n.log.Info("locator gone while ilnpd was down", "locator", l.Locator, "ifindex", l.Ifindex)
			if err := n.dp.DeleteLocalLocator(l.Locator); err != nil && !errors.Is(err, datapath.ErrNotFound) {
				n.log.Warn("datapath locator delete", "locator", l.Locator, "err", err)
			}
			continue
		}
		at := now.Add(-time.Duration(i) * time.Microsecond)
		eff, err := n.cache.UpdateLocal(ilcc.LocalUpdate{Locator: l.Locator, IfIndex: l.Ifindex, Router: router,
			ValidLifetime: valid, PreferredLifetime: preferred}, at)
		if err != nil {
			n.log.Warn("pinned locator not adopted", "locator", l.Locator, "err", err)
			continue
		}
		adopted++
		if (formed[addr] || valid != ilcc.Infinite) && !encap.IsL32(l.Locator) {
			n.formed[addr] = l.Ifindex
		}
		if encap.IsL32(l.Locator) {
			n.prepareIPv4Locator(l.Locator, l.Ifindex)
		} else if err := n.host.addIdentity(addr); err != nil {
			n.log.Warn("identity address", "err", err)
		}
		all = mergeEffects(all, eff)
	}
	n.apply(all, now)
	return adopted
}

// mergeEffects is a then b, as one ILCC operation's effects.
func mergeEffects(a, b ilcc.Effects) ilcc.Effects {
	a.LocalChanged = a.LocalChanged || b.LocalChanged
	a.Updates = append(a.Updates, b.Updates...)
	a.Acks = append(a.Acks, b.Acks...)
	a.Bindings = append(a.Bindings, b.Bindings...)
	a.Removed = append(a.Removed, b.Removed...)
	a.Events = append(a.Events, b.Events...)
	return a
}

// addressLifetimes reports whether addr is on interface ifindex and the interface is running,
// with its remaining valid and preferred lifetimes (ilcc.Infinite for a permanent address).
func (h *host) addressLifetimes(ifindex int, addr netip.Addr) (valid, preferred time.Duration, ok bool) {
	ifc, err := net.InterfaceByIndex(ifindex)
	if err != nil || ifc.Flags&net.FlagRunning == 0 {
		return 0, 0, false
	}
	link, err := h.nl.LinkByIndex(ifindex)
	if err != nil {
		return 0, 0, false
	}
	addrs, err := h.nl.AddrList(link, netlink.FAMILY_V6)
	if err != nil {
		return 0, 0, false
	}
	life := func(secs int) time.Duration {
		if secs < 0 || uint64(secs) >= 0xffffffff {
			return ilcc.Infinite
		}
		return time.Duration(secs) * time.Second
	}
	for _, a := range addrs {
		if ip, _ := netip.AddrFromSlice(a.IP); ip.Unmap() == addr {
			if a.Flags&unix.IFA_F_PERMANENT != 0 {
				return ilcc.Infinite, ilcc.Infinite, true
			}
			return life(a.ValidLft), life(a.PreferedLft), life(a.ValidLft) > 0
		}
	}
	return 0, 0, false
}

func ilccState(s datapath.LocatorState) ilcc.State {
	switch s {
	case datapath.LocatorActive:
		return ilcc.Active
	case datapath.LocatorValid:
		return ilcc.Valid
	case datapath.LocatorAged:
		return ilcc.Aged
	}
	return ilcc.Expired
}

// stateFile is what the loop persists now, unsorted, taken at once (the loop has ended):
// sortState (before encoding) puts it in order (issue 28: at 100,000 sessions the sorts were
// much of a check). The loop takes it in steps (beginSnapshot).
func (n *Node) stateFile() state.File {
	return n.beginSnapshot().finish()
}

// stateFileFixed is what the loop persists but the lists with an entry per session, which a
// snapshot walks (beginSnapshot).
func (n *Node) stateFileFixed() state.File {
	st := state.File{NID: n.nid}
	if layout, err := datapath.Layout(); err == nil {
		st.Layout = layout
	}
	for _, l := range n.cache.Locals() {
		st.Locals = append(st.Locals, state.Local{Locator: l.Locator, IfIndex: l.IfIndex})
	}
	for addr, idx := range n.formed {
		st.Formed = append(st.Formed, state.Address{Addr: addr, IfIndex: idx})
	}
	for addr := range n.host.identities {
		st.Identities = append(st.Identities, addr)
	}
	if n.eph != nil {
		for _, p := range n.eph.Live() {
			st.Ephemeral = append(st.Ephemeral, state.Ephemeral{Peer: p.Peer, NID: p.NID})
		}
	}
	for addr, idx := range n.host.onLink {
		st.EphemeralAddrs = append(st.EphemeralAddrs, state.Address{Addr: addr, IfIndex: idx})
	}
	n.mu.Lock()
	for name, ilvs := range n.peers {
		p := state.Peer{Name: name}
		for _, v := range ilvs {
			p.ILVs = append(p.ILVs, state.RankedIL{Addr: v.ILV.Addr(), Preference: v.Preference})
		}
		if len(p.ILVs) > 0 {
			st.Peers = append(st.Peers, p)
		}
	}
	n.mu.Unlock()
	return st
}

// sortState puts a stateFile in the file's order.
func sortState(st *state.File) {
	slices.SortFunc(st.Formed, func(a, b state.Address) int { return a.Addr.Compare(b.Addr) })
	slices.SortFunc(st.Identities, netip.Addr.Compare)
	slices.SortFunc(st.PeerRoutes, netip.Addr.Compare)
	slices.SortFunc(st.EphemeralAddrs, func(a, b state.Address) int { return a.Addr.Compare(b.Addr) })
	slices.SortFunc(st.Peers, func(a, b state.Peer) int { return cmpString(a.Name, b.Name) })
	slices.SortFunc(st.Correspondents, func(a, b state.Correspondent) int { return cmp.Compare(a.NID, b.NID) })
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// persistShare bounds the loop's time spent keeping the state file current: after a check
// (or a step of one) that took d, the next waits d x persistShare. A lone change is written
// within microseconds; a burst of events with many sessions (a flood of answered pings, each
// opening one) cannot make the loop encode the whole file per event and fall behind the
// newcomers it must serve.
const persistShare = 10

// persist keeps the state file current (the loop calls it after every turn; a SIGKILL loses
// at most the events of the last snapshot's walk and persistShare x its cost). It begins a
// snapshot when the last one is written and an event came since; the snapshot is taken in
// steps (persistStep, statesnap.go), and encoded and written beside the loop, compared with
// the file by its digest.
func (n *Node) persist() {
	c := &n.continuity
	if !c.adopted {
		return // setup failed: the file still describes what is pinned
	}
	stepTurn := c.stepTurn
	c.stepTurn = false
	if c.snap != nil {
		if !stepTurn {
			c.snap.dirty = true // the event may have changed what the walk has passed
		}
		return
	}
	if stepTurn && !c.pending {
		return // the turn only finished a snapshot, and nothing came during it
	}
	start := time.Now()
	if after := time.Unix(0, c.writerAfter.Load()); start.Before(after) && after.After(c.nextCheck) {
		c.nextCheck = after
	}
	if c.writing.Load() && !start.Before(c.nextCheck) {
		c.nextCheck = start.Add(persistRetry)
	}
	if start.Before(c.nextCheck) {
		c.pending = true // armTimer wakes the loop at nextCheck
		return
	}
	c.pending = false
	// The loop takes the snapshot, a share per step; encoding and writing it (most of the
	// cost: 100,000 correspondents held the loop for a third of a second per check, issue
	// 28) run beside. A snapshot of fewer than snapshotStep entries (a correspondent and
	// its peer route are two) is taken whole here.
	c.snap = n.beginSnapshot()
	c.nextStep = start
	n.persistStep()
	c.stepTurn = false
}

// persistRetry is how soon persist looks again when the last snapshot is still being written.
const persistRetry = 10 * time.Millisecond

// writeState writes the state file now if it changed (on the loop, or once it has ended).
func (n *Node) writeState() {
	n.dropSnapshot()
	n.stateSeq++
	n.saveState(n.stateFile(), n.stateSeq)
}

// saveState writes st, snapshot seq, unless it is what the file holds or a later snapshot was
// written already.
//
// The file is encoded entry by entry into its temporary file and compared with the last one
// by its SHA-256 in the same pass (state.WriteChanged): holding the last file and encoding the
// next one whole took some 300 bytes of the daemon's memory per session at 100,000 (issue 28).
func (n *Node) saveState(st state.File, seq uint64) {
	sortState(&st)
	n.stateMu.Lock()
	defer n.stateMu.Unlock()
	if seq < n.lastSeq {
		return
	}
	sum, _, err := state.WriteChanged(n.cfg.StateDir, n.lastState, func(w io.Writer) error { return state.EncodeTo(w, st) })
	if err != nil {
		n.log.Warn("state file", "err", err)
		return
	}
	n.lastState, n.lastSeq = sum, seq
}

// stopStateWrites makes every snapshot still being written a stale one (flush removes the file).
func (n *Node) stopStateWrites() {
	n.stateMu.Lock()
	n.lastSeq = math.MaxUint64
	n.stateMu.Unlock()
}

// persistDeadline is when a deferred state file check is due.
func (n *Node) persistDeadline() (time.Time, bool) {
	return n.continuity.nextCheck, n.continuity.pending
}

// keep ends the daemon and leaves the datapath running for the next one (SIGTERM).
func (n *Node) keep() error {
	var errs []error
	if n.lusock != nil {
		errs = append(errs, n.lusock.Close())
	}
	if n.chsock != nil {
		errs = append(errs, n.chsock.Close())
	}
	if n.host != nil {
		n.host.closeRoutes() // what shutdown queued, before the state file lists it
	}
	n.writeState()
	if n.dp != nil {
		errs = append(errs, n.dp.Close()) // KeepPinned: maps and links stay
	}
	if n.host != nil {
		n.host.nl.Close()
	}
	n.log.Info("datapath left running for the next ilnpd (`ilnpd -flush` removes it)")
	return errors.Join(errs...)
}

// flushAll removes everything this ilnpd set up: programs, pins, peer routes, identity and
// locator addresses, the state file and its bpffs mount.
func (n *Node) flushAll() error {
	var errs []error
	if n.lusock != nil {
		errs = append(errs, n.lusock.Close())
	}
	if n.chsock != nil {
		errs = append(errs, n.chsock.Close())
	}
	if n.dp != nil {
		errs = append(errs, n.dp.Flush())
	}
	if n.host != nil {
		for addr, idx := range n.formed {
			errs = append(errs, n.host.removeAddress(idx, addr))
		}
		errs = append(errs, n.host.close())
	}
	n.dropSnapshot()
	n.stopStateWrites()
	errs = append(errs, state.Remove(n.cfg.StateDir), bpffs.Release(n.cfg.BPFDir(), n.cfg.StateDir))
	n.log.Info("flushed: datapath detached, pins, routes, addresses and state removed")
	return errors.Join(errs...)
}

// Flush makes the running node remove everything it set up and end (`ilnpctl flush`) once
// the caller runs stop (after it has answered the client).
func (n *Node) Flush(ctx context.Context) (stop func(), err error) {
	n.stopMu.Lock()
	stop = n.stop
	n.stopMu.Unlock()
	if stop == nil {
		return nil, errors.New("not running")
	}
	n.flushing.Store(true)
	return stop, nil
}

// FlushStopped removes what an ilnpd with cfg left behind when none is running (`ilnpd
// -flush`): detaches the programs and removes the pins, the peer routes, identity and locator
// addresses the state file lists, the state file and the bpffs mount. Without a state file
// only the datapath goes.
func FlushStopped(cfg config.Config) error {
	var errs []error
	st, err := state.Read(cfg.StateDir)
	if err != nil && !errors.Is(err, state.ErrNotExist) {
		errs = append(errs, fmt.Errorf("state file (addresses and routes it lists are left): %w", err))
	}
	if h, err := newHost(cfg.MTUHeadroom); err != nil {
		errs = append(errs, err)
	} else {
		for _, a := range st.PeerRoutes { // batched: 100,000 took a request each
			if err := h.rw.Delete(routewrite.Route{Dst: a}, func(err error) {
				if err != nil {
					errs = append(errs, err)
				}
			}); err != nil {
				errs = append(errs, fmt.Errorf("remove route to %s: %w", a, err))
			}
		}
		h.closeRoutes()
		for _, a := range st.Identities {
			h.identities[a] = true
			errs = append(errs, h.removeIdentity(a))
		}
		for _, a := range st.EphemeralAddrs {
			errs = append(errs, h.removeAddress128(a.IfIndex, a.Addr))
		}
		for _, a := range st.Formed {
			if err := h.removeAddress(a.IfIndex, a.Addr); err != nil && !errors.Is(err, unix.ENODEV) {
				errs = append(errs, err)
			}
		}
		for _, name := range cfg.Interfaces {
			if ifc, err := net.InterfaceByName(name); err == nil {
				h.encapNeighs[ifc.Index] = true
			}
		}
		errs = append(errs, h.removeEncapNeighbours())
		h.nl.Close()
	}
	errs = append(errs, datapath.FlushPinned(bpffs.Locate(cfg.BPFDir(), cfg.StateDir)), state.Remove(cfg.StateDir),
		bpffs.Release(cfg.BPFDir(), cfg.StateDir))
	return errors.Join(errs...)
}

// mountPins finds or makes the bpffs the datapath pins in (internal/bpffs): under `ip netns
// exec` one the daemon mounts itself would die with its private mount namespace, so a holder
// keeps that namespace for the next daemon.
func (n *Node) mountPins() error {
	p, err := bpffs.Prepare(n.cfg.BPFDir(), n.cfg.StateDir)
	if err != nil {
		return err
	}
	n.pinDir = p.Dir
	if p.Holder != 0 {
		n.log.Info("bpffs kept by a holder process beyond this ilnpd's mount namespace", "dir", p.Dir, "holder", p.Holder)
	}
	return nil
}

// adoptEphemeral takes back the per-correspondent NIDs (nid-mode ephemeral) the last daemon
// used, their interface addresses and the source hints of their peers' routes. Pairings
// whose NID the pinned datapath no longer holds are dropped; without the mode, the datapath's
// extra NIDs go (their sessions are then not adopted).
func (n *Node) adoptEphemeral(st state.File) {
	for _, a := range st.EphemeralAddrs {
		n.host.onLink[a.Addr] = a.IfIndex // removed by syncEphemeralAddrs unless still wanted
	}
	pinned := map[wire.NID]bool{}
	if nids, err := n.dp.LocalNIDs(); err == nil {
		for _, nid := range nids {
			pinned[nid] = true
		}
	}
	for _, e := range st.Ephemeral {
		if n.eph == nil || !pinned[e.NID] {
			continue
		}
		if err := n.eph.Restore(e.Peer, e.NID); err != nil {
			n.log.Warn("ephemeral NID not adopted", "err", err)
			continue
		}
		for _, a := range st.PeerRoutes {
			if ilv, err := wire.ILVFromAddr(a); err == nil && ilv.NID == e.Peer {
				n.host.setPeerSource(a, e.NID)
			}
		}
	}
	for nid := range pinned {
		if !n.localNID(nid) {
			if err := n.dp.DeleteLocalNID(nid); err != nil && !errors.Is(err, datapath.ErrNotFound) {
				n.log.Warn("stale local NID", "nid", nid, "err", err)
			}
		}
	}
}
