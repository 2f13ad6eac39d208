// Package locverify decides which remote locators a node has seen reach its correspondent,
// against the redirection ("bombing") attack: a correspondent that holds a valid session (it
// knows its own nonce, so RFC 6744 does not stop it) announces a victim's locator in a Locator
// Update, and the node would turn its flows towards the victim.
//
// A locator the session began with is verified while it stays in the peer's set. One that first
// appears in a Locator Update, or comes back after it left the set (or,
// for an IPv4 endpoint, a NAT rebinding) is unverified until the correspondent echoes a challenge sent to [locator:NID]: an ICMPv6 Echo
// Request carrying a fresh 128-bit random token (every IPv6 node answers it, RFC 4443 s.4.1,
// so no peer needs new code; only a node that receives at that address learns the token).
// Until then the datapath sends to it at most 3x the bytes received from it (RFC 9000 s.8.1)
// and the rest to a verified locator while one is usable (bpf/lib/verify.h). The challenge
// leaves as the LU-ACK does, so a verified handoff costs no extra round trip: data moves to
// the new locator at once within the credit, and the old locator carries the rest for one RTT.
//
// A locator that left the set comes back unverified, with one exception after RFC 9000 s.9.3
// ("an endpoint MAY skip validation of a peer address if that address has been seen
// recently"): one verified less than RecentlyVerified ago that a fresh LU (its body never
// applied before: internal/luguard, so not a replay) announces from that very locator keeps
// full rate at once, and is still challenged; unanswered within ProbationLifetime it falls back
// to the credit. A node moving back to the network it just left (a phone between its WiFi and
// its cellular network) so loses nothing to its own move back.
//
// The engine is pure: no I/O, no clock of its own; the daemon (internal/node) sends the
// challenges and writes the datapath's unverified map from its actions.
package locverify

import (
	"crypto/rand"
	"fmt"
	"slices"
	"time"

	"ilnp/internal/encap"
	"ilnp/internal/wire"
)

// Mode is the configured strictness (`locator-verification`).
type Mode string

const (
	// Off: every announced locator is believed (the stack before verification).
	Off Mode = "off"
	// Opportunistic: the credit applies to correspondents that have answered a challenge in
	// this session (the one sent when it opened); one that never answers is believed and
	// counted, so a peer that filters ICMPv6 Echo keeps working as before.
	Opportunistic Mode = "opportunistic"
	// Strict: the credit applies to every correspondent.
	Strict Mode = "strict"
)

// ParseMode reads a Mode.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Off, Opportunistic, Strict:
		return m, nil
	}
	return "", fmt.Errorf("want off, opportunistic or strict, got %q", s)
}

// TokenSize is the challenge's length in bytes.
const TokenSize = 16

// Token is one challenge.
type Token [TokenSize]byte

// ChallengeBytes is what one challenge costs on the wire (Ethernet, IPv6, ICMPv6 Echo header
// and token), charged to the locator's credit as the datapath charges frames.
const ChallengeBytes = 14 + 40 + 8 + TokenSize

// ChallengeBytesL32 is what one challenge to an IPv4 locator costs: it goes through the
// session, so it also carries the nonce header (16 bytes at most) inside UDP/IPv4.
const ChallengeBytesL32 = ChallengeBytes + 16 + encap.Overhead

// challengeCost is what a challenge to l is charged.
func challengeCost(l wire.L64) uint64 {
	if encap.IsL32(l) {
		return ChallengeBytesL32
	}
	return ChallengeBytes
}

// Factor is the credit factor (RFC 9000 s.8.1).
const Factor = 3

// DefaultChallengeLifetime is how long an unanswered challenge is remembered.
const DefaultChallengeLifetime = 10 * time.Second

// RecentlyVerified is how long after leaving the set a verified locator may come back at full
// rate (above); ProbationLifetime is how long it has to answer its new challenge then.
const (
	RecentlyVerified  = 30 * time.Second
	ProbationLifetime = 3 * time.Second
)

// maxLeft bounds the locators remembered per correspondent as recently left (the oldest goes).
const maxLeft = 8

// maxPending bounds the outstanding challenges per correspondent (the oldest is forgotten).
const maxPending = 4

// Kind is what an Action asks for.
type Kind int

const (
	// SendChallenge: an Echo Request with Token to [Locator:Peer].
	SendChallenge Kind = iota + 1
	// MarkUnverified: the datapath limits Locator of Peer's sessions to its credit, starting
	// from RxBytes received and TxBytes sent.
	MarkUnverified
	// MarkVerified: the datapath lifts the limit.
	MarkVerified
	// Believed: an unverified locator of a peer that never answered a challenge is believed
	// (Opportunistic); nothing to do but count.
	Believed
	// Charge: the datapath adds TxBytes to Locator's sent bytes (a challenge the daemon sends
	// past the datapath to a locator whose limit is already in place).
	Charge
	// Returned: a recently verified locator came back in a fresh LU from itself and keeps full
	// rate while its challenge is out (RecentlyVerified); nothing to do but count.
	Returned
)

func (k Kind) String() string {
	switch k {
	case SendChallenge:
		return "send-challenge"
	case MarkUnverified:
		return "mark-unverified"
	case MarkVerified:
		return "mark-verified"
	case Believed:
		return "believed"
	case Charge:
		return "charge"
	case Returned:
		return "returned"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Action is one thing for the daemon to do.
type Action struct {
	Kind             Kind
	Peer             wire.NID
	Locator          wire.L64
	Token            Token
	RxBytes, TxBytes uint64
}

// Config configures an Engine.
type Config struct {
	Mode Mode
	// ChallengeLifetime: 0 is DefaultChallengeLifetime.
	ChallengeLifetime time.Duration
	// Random fills a token (nil: crypto/rand).
	Random func([]byte) error
}

// pending is one outstanding challenge, kept in its peer's state (issue 28: no map by token;
// the echo names its peer, so Echoed looks the token up there).
type pending struct {
	token   Token
	loc     wire.L64
	expires offset
}

// expiry is a challenge's place in the expiry queue: its peer and when it expires.
type expiry struct {
	peer    wire.NID
	expires offset
}

// offset is a time as the engine keeps it where there is one per challenge: from its epoch,
// the first time it was given (8 bytes where a time.Time takes 24).
type offset time.Duration

// offsetOf is t as an offset.
func (e *Engine) offsetOf(t time.Time) offset {
	if e.epoch.IsZero() {
		e.epoch = t
	}
	return offset(t.Sub(e.epoch))
}

// peer is one correspondent's state, kept small (issue 28: one per session, 100,000s of
// them), and held by value (Engine.get, put): a correspondent whose state is only "this
// locator is verified" is its map slot and nothing else. Its first verified locator is
// inline; what only a peer under verification or with more locators needs (further
// verified locators, unverified ones, recently left ones, probations, outstanding
// challenges) is in rare, allocated on the first need and dropped once empty again. Its
// methods change the copy they are called on: the engine stores it back (Engine.put).
type peer struct {
	one  wire.L64 // the first verified locator (0: none)
	rare *rarePeer
	// pend is the first outstanding challenge (zero token: none), rare.tokens the later ones:
	// a session's probe needs no rare part.
	pend     pending
	answered bool // echoed a challenge in this session
	probed   bool // Probe sent its challenge
	// in is where get found it (in padding): its place + 1, or 0 (not known), so that put
	// looks up only the map it leaves.
	in int8
}

// The places a peer is kept beyond the lone maps (whose places are their kinds): probing (a
// lone peer whose one challenge, its probe, is out), full (the rest).
const (
	placeProbing = loneKinds + iota
	placeFull
)

// probingPeer is a probing peer's state: a responder session for a challenge lifetime after
// it proved itself (issue 28: every one of a server's sessions passes through it). Its
// challenge went to its one locator.
type probingPeer struct {
	one     wire.L64
	token   Token
	expires offset
}

type rarePeer struct {
	verified   locSet // the verified locators after one, in the order verified
	unverified locSet
	left       []leftLoc      // verified locators that left the set, and when
	probation  []probationLoc // returned at full rate, their challenge outstanding
	tokens     []pending      // after peer.pend
}

type leftLoc struct {
	loc wire.L64
	at  time.Time
}

type probationLoc struct {
	loc   wire.L64
	token Token
}

// locSet is a set of locators in a slice: a correspondent lists a few.
type locSet []wire.L64

func (s locSet) has(l wire.L64) bool { return slices.Contains(s, l) }

func (s *locSet) add(l wire.L64) {
	if !s.has(l) {
		*s = append(*s, l)
	}
}

func (s *locSet) del(l wire.L64) {
	if i := slices.Index(*s, l); i >= 0 {
		*s = slices.Delete(*s, i, i+1)
	}
	if len(*s) == 0 {
		*s = nil
	}
}

// more is st's rare state, allocated if need be.
func (st *peer) more() *rarePeer {
	if st.rare == nil {
		st.rare = &rarePeer{}
	}
	return st.rare
}

// tidy drops the rare state once nothing is in it.
func (st *peer) tidy() {
	if r := st.rare; r != nil && len(r.verified) == 0 && len(r.unverified) == 0 && len(r.left) == 0 && len(r.probation) == 0 && len(r.tokens) == 0 {
		st.rare = nil
	}
}

func (st *peer) isVerified(l wire.L64) bool {
	return l != 0 && (st.one == l || st.rare != nil && st.rare.verified.has(l))
}

// verify adds l to the verified locators.
func (st *peer) verify(l wire.L64) {
	switch {
	case l == 0 || st.isVerified(l):
	case st.one == 0:
		st.one = l
	default:
		st.more().verified.add(l)
	}
}

// verifiedList is the verified locators in the order verified, in buf if they fit.
func (st *peer) verifiedList(buf []wire.L64) []wire.L64 {
	out := buf[:0]
	if st.one != 0 {
		out = append(out, st.one)
	}
	if st.rare != nil {
		out = append(out, st.rare.verified...)
	}
	return out
}

// setVerified makes ls (in order) the verified locators.
func (st *peer) setVerified(ls []wire.L64) {
	st.one = 0
	if st.rare != nil {
		st.rare.verified = nil
	}
	for _, l := range ls {
		st.verify(l)
	}
	st.tidy()
}

func (st *peer) unverifyVerified(l wire.L64) {
	if st.isVerified(l) {
		var buf [4]wire.L64
		st.setVerified(slices.DeleteFunc(st.verifiedList(buf[:]), func(x wire.L64) bool { return x == l }))
	}
}

func (st *peer) isUnverified(l wire.L64) bool { return st.rare != nil && st.rare.unverified.has(l) }

func (st *peer) unverify(l wire.L64) {
	st.unverifyVerified(l)
	st.more().unverified.add(l)
}

func (st *peer) probationToken(l wire.L64) Token {
	if st.rare != nil {
		for _, p := range st.rare.probation {
			if p.loc == l {
				return p.token
			}
		}
	}
	return Token{}
}

func (st *peer) endProbation(l wire.L64) {
	if st.rare != nil {
		st.rare.probation = slices.DeleteFunc(st.rare.probation, func(p probationLoc) bool { return p.loc == l })
	}
}

// tokens is the outstanding challenges, oldest first, in buf if they fit.
func (st *peer) tokens(buf []pending) []pending {
	out := buf[:0]
	if st.pend.token != (Token{}) {
		out = append(out, st.pend)
	}
	if st.rare != nil {
		out = append(out, st.rare.tokens...)
	}
	return out
}

// setTokens makes ts (oldest first) the outstanding challenges.
func (st *peer) setTokens(ts []pending) {
	st.pend = pending{}
	if st.rare != nil {
		st.rare.tokens = nil
	}
	for i, t := range ts {
		if i == 0 {
			st.pend = t
			continue
		}
		r := st.more()
		r.tokens = append(r.tokens, t)
	}
	st.tidy()
}

// findToken is st's outstanding challenge t.
func (st *peer) findToken(t Token) (pending, bool) {
	if t == (Token{}) {
		return pending{}, false
	}
	if st.pend.token == t {
		return st.pend, true
	}
	if st.rare != nil {
		for _, pd := range st.rare.tokens {
			if pd.token == t {
				return pd, true
			}
		}
	}
	return pending{}, false
}

func (st *peer) dropToken(t Token) {
	var buf [maxPending]pending
	st.setTokens(slices.DeleteFunc(st.tokens(buf[:]), func(x pending) bool { return x.token == t }))
}

// dropExpired drops the challenges that expired before now; it says whether there were any.
func (st *peer) dropExpired(now offset) bool {
	var buf [maxPending]pending
	ts := st.tokens(buf[:])
	n := len(ts)
	ts = slices.DeleteFunc(ts, func(x pending) bool { return x.expires < now })
	if len(ts) == n {
		return false
	}
	st.setTokens(ts)
	return true
}

// Engine tracks the verification state of every correspondent. Not safe for concurrent use
// (the daemon's loop owns it).
type Engine struct {
	cfg Config
	// lone holds the correspondents in the steady states all a server's idle sessions come
	// to, by their flags (place): one verified locator and nothing under way; peers holds
	// the others (get and put move a peer between them). A lone one is an 8-byte value where
	// a peer's takes 56 (issue 28: at 100,000 sessions a map slot of the one is some 24
	// bytes).
	lone  [loneKinds]map[wire.NID]wire.L64
	peers map[wire.NID]peer
	// probing holds the lone peers whose probe is out: a responder session for a challenge
	// lifetime after it proved itself, 32 bytes where a full peer takes 56 and a map by token
	// took another 40 (issue 28).
	probing map[wire.NID]probingPeer
	// lonePeak, peersPeak and probingPeak are the most entries each map held since it was
	// made: a Go map keeps the room of its largest size, and the peers of a burst of new
	// sessions pass through probing to lone (shrink).
	lonePeak    [loneKinds]int
	peersPeak   int
	probingPeak int

	// order holds the challenges' peers and expiries in the order they were sent, which is
	// their order of expiry (one lifetime for all): expire pops the expired ones off its front
	// instead of a pass over every outstanding challenge on every call (a mass move of 10,000
	// LUs a second made that O(LUs in the last lifetime) per LU; issue 28). Entries of
	// challenges answered or dropped since stay in it until they reach the front, where they
	// find nothing expired at their peer.
	order []expiry
	// probation holds the returned locators' deadlines in the order they were set (one
	// lifetime for all); entries whose locator was answered or left since are skipped.
	probation []probationEntry
	// left holds the locators that left a peer's set in the order they left (one
	// RecentlyVerified for all): a record of one that left longer ago than that answers no
	// question, and forgetting them lets a correspondent that moved once go back to its
	// small record (issue 28: after a mass move every session kept one for good). Entries
	// whose locator came back or left again since are skipped.
	left []leftEntry
	// epoch is what the challenges' expiry offsets count from.
	epoch time.Time
}

type leftEntry struct {
	peer wire.NID
	loc  wire.L64
	at   time.Time
}

type probationEntry struct {
	peer     wire.NID
	loc      wire.L64
	token    Token
	deadline time.Time
}

// The kinds of lone peers: opened (a session a correspondent opened, not probed yet), probed
// and never answered (a peer that filters ICMPv6 Echo, or whose challenge is out no more),
// answered.
const (
	loneOpened = iota
	loneProbed
	loneAnswered
	loneKinds
)

// place is the map st belongs in: its lone kind when it is a lone peer, placeProbing or
// placeFull.
func (st *peer) place() int {
	switch {
	case st.one == 0 || st.rare != nil:
		return placeFull
	case st.pend.token != (Token{}):
		if st.probed && !st.answered && st.pend.loc == st.one {
			return placeProbing
		}
		return placeFull
	case st.answered:
		return loneAnswered // probed or not: Probe asks no more
	case st.probed:
		return loneProbed
	}
	return loneOpened
}

// get is p's state (ok false: none), a copy: a change to it is stored with put.
func (e *Engine) get(p wire.NID) (st peer, ok bool) {
	for _, k := range [...]int{loneAnswered, loneProbed, loneOpened} {
		if l, ok := e.lone[k][p]; ok {
			return peer{one: l, answered: k == loneAnswered, probed: k != loneOpened, in: int8(k + 1)}, true
		}
	}
	if pp, ok := e.probing[p]; ok {
		return peer{one: pp.one, pend: pending{token: pp.token, loc: pp.one, expires: pp.expires}, probed: true, in: placeProbing + 1}, true
	}
	if st, ok = e.peers[p]; ok {
		st.in = placeFull + 1
	}
	return st, ok
}

// put stores st as p's state, in the smallest map that holds all it is.
func (e *Engine) put(p wire.NID, st peer) {
	to := st.place()
	if from := int(st.in) - 1; from != to {
		e.drop(p, from, to)
	}
	switch to {
	case placeFull:
		e.peers[p] = st
		e.peersPeak = max(e.peersPeak, len(e.peers))
	case placeProbing:
		e.probing[p] = probingPeer{one: st.one, token: st.pend.token, expires: st.pend.expires}
		e.probingPeak = max(e.probingPeak, len(e.probing))
	default:
		e.lone[to][p] = st.one
		e.lonePeak[to] = max(e.lonePeak[to], len(e.lone[to]))
	}
}

// drop removes p from the map of place from (-1: from every map but keep's).
func (e *Engine) drop(p wire.NID, from, keep int) {
	for k, m := range e.lone {
		if from >= 0 && from != k || k == keep {
			continue
		}
		if _, ok := m[p]; ok {
			delete(m, p)
			e.lone[k], e.lonePeak[k] = shrink(m, e.lonePeak[k])
		}
	}
	if (from < 0 || from == placeProbing) && keep != placeProbing {
		if _, ok := e.probing[p]; ok {
			delete(e.probing, p)
			e.probing, e.probingPeak = shrink(e.probing, e.probingPeak)
		}
	}
	if (from < 0 || from == placeFull) && keep != placeFull {
		if _, ok := e.peers[p]; ok {
			delete(e.peers, p)
			e.peers, e.peersPeak = shrink(e.peers, e.peersPeak)
		}
	}
}

// mapsFresh is the peak above which a map that shrank to a quarter of it is made afresh.
const mapsFresh = 1024

// shrink makes m afresh once it holds less than a quarter of its peak, returning the map and
// its peak: the copy costs what the entries left cost, so the peaks pay for it.
func shrink[V any](m map[wire.NID]V, peak int) (map[wire.NID]V, int) {
	if peak <= mapsFresh || len(m) >= peak/4 {
		return m, peak
	}
	fresh := make(map[wire.NID]V, len(m))
	for k, v := range m {
		fresh[k] = v
	}
	return fresh, len(fresh)
}

// New returns an engine.
func New(cfg Config) (*Engine, error) {
	if _, err := ParseMode(string(cfg.Mode)); err != nil {
		return nil, fmt.Errorf("locator verification: %w", err)
	}
	if cfg.ChallengeLifetime <= 0 {
		cfg.ChallengeLifetime = DefaultChallengeLifetime
	}
	if cfg.Random == nil {
		cfg.Random = func(b []byte) error { _, err := rand.Read(b); return err }
	}
	e := &Engine{cfg: cfg, peers: map[wire.NID]peer{}, probing: map[wire.NID]probingPeer{}}
	for k := range e.lone {
		e.lone[k] = map[wire.NID]wire.L64{}
	}
	return e, nil
}

// Mode is the engine's mode.
func (e *Engine) Mode() Mode { return e.cfg.Mode }

// Opened records a session: its locators (from name resolution or its first exchange) are
// verified. With probe (and unless Off) it challenges the active one, to learn whether the
// peer answers; a session a correspondent opened is probed later (Probe), once it proved
// itself, so that spoofed packets cannot make this node send challenges to anyone.
func (e *Engine) Opened(p wire.NID, locs []wire.L64, active wire.L64, probe bool, now time.Time) ([]Action, error) {
	if e.cfg.Mode == Off {
		return nil, nil
	}
	var st peer
	for _, l := range locs {
		st.verify(l)
	}
	st.verify(active)
	e.forget(p)
	e.put(p, st)
	if !probe {
		return nil, nil
	}
	return e.Probe(p, active, now)
}

// Credit is an unverified locator's state as the datapath counted it.
type Credit struct {
	Locator          wire.L64
	RxBytes, TxBytes uint64
}

// Resumed records a session adopted from an earlier daemon (a restart), which left the
// datapath limiting the locators in unverified: they stay unverified, and each gets a fresh
// challenge (the earlier daemon's tokens are gone), charged to its credit. A flow towards it
// has usually spent that credit, and no announcement may come to pay for another challenge,
// so this one is sent even beyond the credit: one challenge per locator per restart, which the
// charge takes out of what the datapath may send next. The session's other locators count as
// verified. In Opportunistic mode a limit left behind means the peer had answered a
// challenge, so later announcements are limited too.
func (e *Engine) Resumed(p wire.NID, locs []wire.L64, active wire.L64, unverified []Credit, now time.Time) ([]Action, error) {
	if e.cfg.Mode == Off {
		return nil, nil
	}
	if _, err := e.Opened(p, locs, active, false, now); err != nil {
		return nil, err
	}
	st, _ := e.get(p)
	defer func() { e.put(p, st) }()
	var out []Action
	for _, c := range unverified {
		if c.Locator == 0 || st.isUnverified(c.Locator) {
			continue
		}
		st.unverify(c.Locator)
		st.answered = st.answered || e.cfg.Mode == Opportunistic
		a, err := e.challenge(p, &st, c.Locator, now)
		if err != nil {
			return out, err
		}
		out = append(out, Action{Kind: Charge, Peer: p, Locator: c.Locator, TxBytes: challengeCost(c.Locator)}, a)
	}
	return out, nil
}

// Probe challenges p's locator active once per session, unless p has answered already.
func (e *Engine) Probe(p wire.NID, active wire.L64, now time.Time) ([]Action, error) {
	st, ok := e.get(p)
	if e.cfg.Mode == Off || !ok || st.probed || st.answered || active == 0 {
		return nil, nil
	}
	st.probed = true
	a, err := e.challenge(p, &st, active, now)
	e.put(p, st)
	if err != nil {
		return nil, err
	}
	return []Action{a}, nil
}

// Announced handles an applied Locator Update of p that lists locs and arrived from the wire
// locator from, luBytes long (as a frame). New locators become unverified with the LU as their
// first credit when they are its source; a locator with credit for a challenge gets one.
// fresh says the LU's body was never applied before (internal/luguard), so it is no replay: a
// recently verified locator it announces from itself returns at full rate (RecentlyVerified).
func (e *Engine) Announced(p wire.NID, locs []wire.L64, from wire.L64, luBytes uint64, fresh bool, now time.Time) ([]Action, error) {
	if e.cfg.Mode == Off {
		return nil, nil
	}
	e.expire(now)
	// A session this engine never saw open (adopted after a restart) starts with nothing:
	// what it knew then is unknown, so everything announced from now on is new.
	st, _ := e.get(p)
	defer func() { e.put(p, st) }()
	// An LU lists all the peer's locators (RFC 6743 s.2): one it no longer lists has left,
	// and its verification leaves with it. Should it come back (the peer moving back, or a
	// copy of an old LU replayed from the path), it is challenged again.
	var buf, keptBuf [4]wire.L64
	kept := keptBuf[:0]
	for _, l := range st.verifiedList(buf[:]) {
		if slices.Contains(locs, l) {
			kept = append(kept, l)
			continue
		}
		st.endProbation(l)
		st.remember(l, now)
		e.left = append(e.left, leftEntry{peer: p, loc: l, at: now})
	}
	st.setVerified(kept)
	return e.added(p, &st, locs, from, luBytes, fresh, now)
}

// Roamed handles a nonce-verified packet of p from l, a locator its set does not list (a NAT
// endpoint that moved), pktBytes long: l is new as if announced from itself, and the set's
// other locators stay as they are (nothing left).
func (e *Engine) Roamed(p wire.NID, l wire.L64, pktBytes uint64, now time.Time) ([]Action, error) {
	if e.cfg.Mode == Off {
		return nil, nil
	}
	e.expire(now)
	st, _ := e.get(p)
	defer func() { e.put(p, st) }()
	return e.added(p, &st, []wire.L64{l}, l, pktBytes, false, now)
}

// added is Announced's work for each of locs.
func (e *Engine) added(p wire.NID, st *peer, locs []wire.L64, from wire.L64, luBytes uint64, fresh bool, now time.Time) ([]Action, error) {
	var out []Action
	for _, l := range locs {
		switch {
		case l == 0 || st.isVerified(l):
			continue
		case st.isUnverified(l):
			// Announced again (a retransmission, or a new LU from it): challenge again if
			// it is the sender and nothing is outstanding for it.
			if l == from && !e.outstanding(st, l) {
				a, err := e.challenge(p, st, l, now)
				if err != nil {
					return out, err
				}
				out = append(out, a)
			}
			continue
		case e.cfg.Mode == Opportunistic && !st.answered:
			st.verify(l)
			out = append(out, Action{Kind: Believed, Peer: p, Locator: l})
			continue
		case fresh && l == from && st.recentlyLeft(l, now):
			a, err := e.challenge(p, st, l, now)
			if err != nil {
				return out, err
			}
			r := st.more()
			r.left = slices.DeleteFunc(r.left, func(x leftLoc) bool { return x.loc == l })
			st.verify(l)
			st.endProbation(l)
			r.probation = append(r.probation, probationLoc{loc: l, token: a.Token})
			e.probation = append(e.probation, probationEntry{peer: p, loc: l, token: a.Token, deadline: now.Add(ProbationLifetime)})
			out = append(out, Action{Kind: Returned, Peer: p, Locator: l}, a)
			continue
		}
		st.more().unverified.add(l)
		mark := Action{Kind: MarkUnverified, Peer: p, Locator: l}
		if l == from {
			mark.RxBytes = luBytes
		}
		var ch *Action
		if mark.TxBytes+challengeCost(l) <= Factor*mark.RxBytes {
			a, err := e.challenge(p, st, l, now)
			if err != nil {
				return out, err
			}
			ch = &a
			mark.TxBytes += challengeCost(l)
		}
		out = append(out, mark) // the limit is in place before the challenge leaves
		if ch != nil {
			out = append(out, *ch)
		}
	}
	return out, nil
}

// Echoed handles an Echo Reply from peer p carrying token. ok is false for a token the engine
// did not send to p (forged, late, or another daemon's): nothing changes then.
func (e *Engine) Echoed(p wire.NID, token Token, now time.Time) (actions []Action, ok bool) {
	e.expire(now)
	st, known := e.get(p)
	if !known {
		return nil, false
	}
	pd, found := st.findToken(token)
	if !found {
		return nil, false
	}
	st.answered = true
	switch {
	case st.probationToken(pd.loc) == token:
		st.endProbation(pd.loc) // it kept full rate and has now proved it
	case st.isUnverified(pd.loc):
		st.rare.unverified.del(pd.loc)
		st.verify(pd.loc)
		actions = []Action{{Kind: MarkVerified, Peer: p, Locator: pd.loc}}
	}
	st.dropToken(token)
	e.put(p, st)
	return actions, true
}

// Closed forgets a correspondent whose session ended.
func (e *Engine) Closed(p wire.NID) { e.forget(p) }

// Unverified lists p's unverified locators.
func (e *Engine) Unverified(p wire.NID) []wire.L64 {
	st, _ := e.get(p)
	if st.rare == nil || len(st.rare.unverified) == 0 {
		return nil
	}
	out := slices.Clone(st.rare.unverified)
	slices.Sort(out)
	return out
}

// Known says whether the engine has state for p (a session it saw open or announce).
func (e *Engine) Known(p wire.NID) bool {
	_, ok := e.get(p)
	return ok
}

// Answered says whether p echoed a challenge in this session.
func (e *Engine) Answered(p wire.NID) bool {
	st, _ := e.get(p)
	return st.answered
}

// Tick puts the returned locators whose challenge went unanswered for ProbationLifetime under
// the credit, as any other unverified locator (RecentlyVerified).
func (e *Engine) Tick(now time.Time) []Action {
	var out []Action
	for len(e.probation) > 0 && !now.Before(e.probation[0].deadline) {
		pe := e.probation[0]
		e.probation = e.probation[1:]
		st, ok := e.get(pe.peer)
		if !ok || st.probationToken(pe.loc) != pe.token {
			continue // answered, left, or the session is gone
		}
		st.endProbation(pe.loc)
		st.unverify(pe.loc)
		e.put(pe.peer, st)
		out = append(out, Action{Kind: MarkUnverified, Peer: pe.peer, Locator: pe.loc, TxBytes: challengeCost(pe.loc)})
	}
	if len(e.probation) == 0 {
		e.probation = nil
	}
	e.expire(now)
	return out
}

// expireSlack is how long after a challenge expires Tick may come to forget it: the echoes
// that come check expiry themselves, so only memory waits, and the wakes come in batches.
const expireSlack = time.Second

// NextDeadline is when Tick has work next.
func (e *Engine) NextDeadline() (time.Time, bool) {
	var next time.Time
	if len(e.probation) > 0 {
		next = e.probation[0].deadline
	}
	if len(e.order) > 0 {
		if d := e.epoch.Add(time.Duration(e.order[0].expires) + expireSlack); next.IsZero() || d.Before(next) {
			next = d
		}
	}
	if len(e.left) > 0 {
		if d := e.left[0].at.Add(RecentlyVerified); next.IsZero() || d.Before(next) {
			next = d
		}
	}
	return next, !next.IsZero()
}

// forgetLeft drops the records of locators that left RecentlyVerified or longer ago.
func (e *Engine) forgetLeft(now time.Time) {
	for len(e.left) > 0 && now.Sub(e.left[0].at) >= RecentlyVerified {
		x := e.left[0]
		e.left = e.left[1:]
		st, ok := e.get(x.peer)
		if !ok || st.rare == nil {
			continue
		}
		st.rare.left = slices.DeleteFunc(st.rare.left, func(l leftLoc) bool { return l.loc == x.loc && !l.at.After(x.at) })
		if len(st.rare.left) == 0 {
			st.rare.left = nil
		}
		st.tidy()
		e.put(x.peer, st)
	}
	if len(e.left) == 0 {
		e.left = nil // let a burst's array go
	}
}

// remember records that the verified locator l left the set at now, forgetting the oldest
// when maxLeft are remembered.
func (st *peer) remember(l wire.L64, now time.Time) {
	r := st.more()
	if len(r.left) >= maxLeft {
		oldest := 0
		for i, x := range r.left {
			if x.at.Before(r.left[oldest].at) {
				oldest = i
			}
		}
		r.left = slices.Delete(r.left, oldest, oldest+1)
	}
	for i := range r.left {
		if r.left[i].loc == l {
			r.left[i].at = now
			return
		}
	}
	r.left = append(r.left, leftLoc{loc: l, at: now})
}

func (st *peer) recentlyLeft(l wire.L64, now time.Time) bool {
	if st.rare == nil {
		return false
	}
	for _, x := range st.rare.left {
		if x.loc == l {
			return now.Sub(x.at) < RecentlyVerified
		}
	}
	return false
}

func (e *Engine) challenge(p wire.NID, st *peer, l wire.L64, now time.Time) (Action, error) {
	var t Token
	if err := e.cfg.Random(t[:]); err != nil {
		return Action{}, fmt.Errorf("challenge for %v at %v: %w", p, l, err)
	}
	if t == (Token{}) {
		return Action{}, fmt.Errorf("challenge for %v at %v: the random source gave a zero token", p, l)
	}
	var buf [maxPending + 1]pending
	ts := st.tokens(buf[:])
	if len(ts) >= maxPending {
		ts = ts[1:]
	}
	exp := e.offsetOf(now.Add(e.cfg.ChallengeLifetime))
	st.setTokens(append(ts, pending{token: t, loc: l, expires: exp}))
	e.order = append(e.order, expiry{peer: p, expires: exp})
	return Action{Kind: SendChallenge, Peer: p, Locator: l, Token: t}, nil
}

func (e *Engine) outstanding(st *peer, l wire.L64) bool {
	var buf [maxPending]pending
	for _, pd := range st.tokens(buf[:]) {
		if pd.loc == l {
			return true
		}
	}
	return false
}

func (e *Engine) expire(now time.Time) {
	at := e.offsetOf(now)
	for len(e.order) > 0 && e.order[0].expires < at {
		x := e.order[0]
		e.order = e.order[1:]
		// The peer's challenges expire in the order sent: those before now go (none when
		// this one was answered or dropped since: maxPending, forget).
		if st, ok := e.get(x.peer); ok && st.dropExpired(at) {
			e.put(x.peer, st)
		}
	}
	if len(e.order) == 0 {
		e.order = nil // let a burst's array go
	}
	e.forgetLeft(now)
}

func (e *Engine) forget(p wire.NID) { e.drop(p, -1, -1) }
