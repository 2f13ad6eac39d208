package locverify

// The engine before issue 28's move of challenges into their peers' state (commit 8d31786),
// kept as the reference for FuzzEngineDifferential: names prefixed v0, comments cut.

import (
	"crypto/rand"
	"fmt"
	"slices"
	"time"

	"ilnp/internal/wire"
)

type v0pending struct {
	v0peer  wire.NID
	loc     wire.L64
	expires v0offset
}

type v0offset time.Duration

func (e *v0Engine) offsetOf(t time.Time) v0offset {
	if e.epoch.IsZero() {
		e.epoch = t
	}
	return v0offset(t.Sub(e.epoch))
}

type v0peer struct {
	one      wire.L64 // the first verified locator (0: none)
	rare     *v0rarePeer
	tok      Token
	answered bool // echoed a challenge in this session
	probed   bool // Probe sent its challenge
	in       int8
}

const v0inFull = v0loneKinds + 1

type v0rarePeer struct {
	verified   locSet // the verified locators after one, in the order verified
	unverified locSet
	left       []v0leftLoc      // verified locators that left the set, and when
	probation  []v0probationLoc // returned at full rate, their challenge outstanding
	tokens     []Token          // after v0peer.tok
}

type v0leftLoc struct {
	loc wire.L64
	at  time.Time
}

type v0probationLoc struct {
	loc   wire.L64
	token Token
}

func (st *v0peer) more() *v0rarePeer {
	if st.rare == nil {
		st.rare = &v0rarePeer{}
	}
	return st.rare
}

func (st *v0peer) tidy() {
	if r := st.rare; r != nil && len(r.verified) == 0 && len(r.unverified) == 0 && len(r.left) == 0 && len(r.probation) == 0 && len(r.tokens) == 0 {
		st.rare = nil
	}
}

func (st *v0peer) isVerified(l wire.L64) bool {
	return l != 0 && (st.one == l || st.rare != nil && st.rare.verified.has(l))
}

func (st *v0peer) verify(l wire.L64) {
	switch {
	case l == 0 || st.isVerified(l):
	case st.one == 0:
		st.one = l
	default:
		st.more().verified.add(l)
	}
}

func (st *v0peer) verifiedList(buf []wire.L64) []wire.L64 {
	out := buf[:0]
	if st.one != 0 {
		out = append(out, st.one)
	}
	if st.rare != nil {
		out = append(out, st.rare.verified...)
	}
	return out
}

func (st *v0peer) setVerified(ls []wire.L64) {
	st.one = 0
	if st.rare != nil {
		st.rare.verified = nil
	}
	for _, l := range ls {
		st.verify(l)
	}
	st.tidy()
}

func (st *v0peer) unverifyVerified(l wire.L64) {
	if st.isVerified(l) {
		var buf [4]wire.L64
		st.setVerified(slices.DeleteFunc(st.verifiedList(buf[:]), func(x wire.L64) bool { return x == l }))
	}
}

func (st *v0peer) isUnverified(l wire.L64) bool { return st.rare != nil && st.rare.unverified.has(l) }

func (st *v0peer) unverify(l wire.L64) {
	st.unverifyVerified(l)
	st.more().unverified.add(l)
}

func (st *v0peer) probationToken(l wire.L64) Token {
	if st.rare != nil {
		for _, p := range st.rare.probation {
			if p.loc == l {
				return p.token
			}
		}
	}
	return Token{}
}

func (st *v0peer) endProbation(l wire.L64) {
	if st.rare != nil {
		st.rare.probation = slices.DeleteFunc(st.rare.probation, func(p v0probationLoc) bool { return p.loc == l })
	}
}

func (st *v0peer) tokens(buf []Token) []Token {
	out := buf[:0]
	if st.tok != (Token{}) {
		out = append(out, st.tok)
	}
	if st.rare != nil {
		out = append(out, st.rare.tokens...)
	}
	return out
}

func (st *v0peer) setTokens(ts []Token) {
	st.tok = Token{}
	if st.rare != nil {
		st.rare.tokens = nil
	}
	for i, t := range ts {
		if i == 0 {
			st.tok = t
			continue
		}
		r := st.more()
		r.tokens = append(r.tokens, t)
	}
	st.tidy()
}

func (st *v0peer) dropToken(t Token) {
	var buf [maxPending]Token
	st.setTokens(slices.DeleteFunc(st.tokens(buf[:]), func(x Token) bool { return x == t }))
}

type v0Engine struct {
	cfg       Config
	lone      [v0loneKinds]map[wire.NID]wire.L64
	peers     map[wire.NID]v0peer
	lonePeak  [v0loneKinds]int
	peersPeak int

	tokens     map[Token]v0pending
	order      []Token
	probation  []v0probationEntry
	left       []v0leftEntry
	tokensPeak int
	epoch      time.Time
}

const v0tokensFresh = 1024

type v0leftEntry struct {
	v0peer wire.NID
	loc    wire.L64
	at     time.Time
}

type v0probationEntry struct {
	v0peer   wire.NID
	loc      wire.L64
	token    Token
	deadline time.Time
}

const (
	v0loneOpened = iota
	v0loneProbed
	v0loneAnswered
	v0loneKinds
)

func (st *v0peer) loneKind() int {
	switch {
	case st.one == 0 || st.rare != nil || st.tok != (Token{}):
		return -1
	case st.answered:
		return v0loneAnswered // probed or not: Probe asks no more
	case st.probed:
		return v0loneProbed
	}
	return v0loneOpened
}

func (e *v0Engine) get(p wire.NID) (st v0peer, ok bool) {
	for _, k := range [...]int{v0loneAnswered, v0loneProbed, v0loneOpened} {
		if l, ok := e.lone[k][p]; ok {
			return v0peer{one: l, answered: k == v0loneAnswered, probed: k != v0loneOpened, in: int8(k + 1)}, true
		}
	}
	if st, ok = e.peers[p]; ok {
		st.in = v0inFull
	}
	return st, ok
}

func (e *v0Engine) put(p wire.NID, st v0peer) {
	k := st.loneKind()
	switch in := int(st.in); {
	case in == 0:
		e.dropLone(p, k)
		if k >= 0 {
			e.dropFull(p)
		}
	case in == v0inFull:
		if k >= 0 {
			e.dropFull(p)
		}
	case in-1 != k:
		e.dropLone(p, k)
	}
	if k >= 0 {
		e.lone[k][p] = st.one
		e.lonePeak[k] = max(e.lonePeak[k], len(e.lone[k]))
		return
	}
	e.peers[p] = st
	e.peersPeak = max(e.peersPeak, len(e.peers))
}

func (e *v0Engine) dropLone(p wire.NID, keep int) {
	for k, m := range e.lone {
		if _, ok := m[p]; ok && k != keep {
			delete(m, p)
			e.lone[k], e.lonePeak[k] = v0shrink(m, e.lonePeak[k])
		}
	}
}

func (e *v0Engine) dropFull(p wire.NID) {
	if _, ok := e.peers[p]; ok {
		delete(e.peers, p)
		e.peers, e.peersPeak = v0shrink(e.peers, e.peersPeak)
	}
}

const v0mapsFresh = 1024

func v0shrink[V any](m map[wire.NID]V, peak int) (map[wire.NID]V, int) {
	if peak <= v0mapsFresh || len(m) >= peak/4 {
		return m, peak
	}
	fresh := make(map[wire.NID]V, len(m))
	for k, v := range m {
		fresh[k] = v
	}
	return fresh, len(fresh)
}

func v0New(cfg Config) (*v0Engine, error) {
	if _, err := ParseMode(string(cfg.Mode)); err != nil {
		return nil, fmt.Errorf("locator verification: %w", err)
	}
	if cfg.ChallengeLifetime <= 0 {
		cfg.ChallengeLifetime = DefaultChallengeLifetime
	}
	if cfg.Random == nil {
		cfg.Random = func(b []byte) error { _, err := rand.Read(b); return err }
	}
	e := &v0Engine{cfg: cfg, peers: map[wire.NID]v0peer{}, tokens: map[Token]v0pending{}}
	for k := range e.lone {
		e.lone[k] = map[wire.NID]wire.L64{}
	}
	return e, nil
}

func (e *v0Engine) Mode() Mode { return e.cfg.Mode }

func (e *v0Engine) Opened(p wire.NID, locs []wire.L64, active wire.L64, probe bool, now time.Time) ([]Action, error) {
	if e.cfg.Mode == Off {
		return nil, nil
	}
	var st v0peer
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

func (e *v0Engine) Resumed(p wire.NID, locs []wire.L64, active wire.L64, unverified []Credit, now time.Time) ([]Action, error) {
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

func (e *v0Engine) Probe(p wire.NID, active wire.L64, now time.Time) ([]Action, error) {
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

func (e *v0Engine) Announced(p wire.NID, locs []wire.L64, from wire.L64, luBytes uint64, fresh bool, now time.Time) ([]Action, error) {
	if e.cfg.Mode == Off {
		return nil, nil
	}
	e.expire(now)
	st, _ := e.get(p)
	defer func() { e.put(p, st) }()
	var buf, keptBuf [4]wire.L64
	kept := keptBuf[:0]
	for _, l := range st.verifiedList(buf[:]) {
		if slices.Contains(locs, l) {
			kept = append(kept, l)
			continue
		}
		st.endProbation(l)
		st.remember(l, now)
		e.left = append(e.left, v0leftEntry{v0peer: p, loc: l, at: now})
	}
	st.setVerified(kept)
	return e.added(p, &st, locs, from, luBytes, fresh, now)
}

func (e *v0Engine) Roamed(p wire.NID, l wire.L64, pktBytes uint64, now time.Time) ([]Action, error) {
	if e.cfg.Mode == Off {
		return nil, nil
	}
	e.expire(now)
	st, _ := e.get(p)
	defer func() { e.put(p, st) }()
	return e.added(p, &st, []wire.L64{l}, l, pktBytes, false, now)
}

func (e *v0Engine) added(p wire.NID, st *v0peer, locs []wire.L64, from wire.L64, luBytes uint64, fresh bool, now time.Time) ([]Action, error) {
	var out []Action
	for _, l := range locs {
		switch {
		case l == 0 || st.isVerified(l):
			continue
		case st.isUnverified(l):
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
			r.left = slices.DeleteFunc(r.left, func(x v0leftLoc) bool { return x.loc == l })
			st.verify(l)
			st.endProbation(l)
			r.probation = append(r.probation, v0probationLoc{loc: l, token: a.Token})
			e.probation = append(e.probation, v0probationEntry{v0peer: p, loc: l, token: a.Token, deadline: now.Add(ProbationLifetime)})
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

func (e *v0Engine) Echoed(p wire.NID, token Token, now time.Time) (actions []Action, ok bool) {
	e.expire(now)
	pd, found := e.tokens[token]
	if !found || pd.v0peer != p {
		return nil, false
	}
	delete(e.tokens, token)
	st, known := e.get(p)
	if !known {
		return nil, true
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

func (e *v0Engine) Closed(p wire.NID) { e.forget(p) }

func (e *v0Engine) Unverified(p wire.NID) []wire.L64 {
	st, _ := e.get(p)
	if st.rare == nil || len(st.rare.unverified) == 0 {
		return nil
	}
	out := slices.Clone(st.rare.unverified)
	slices.Sort(out)
	return out
}

func (e *v0Engine) Known(p wire.NID) bool {
	_, ok := e.get(p)
	return ok
}

func (e *v0Engine) Answered(p wire.NID) bool {
	st, _ := e.get(p)
	return st.answered
}

func (e *v0Engine) Tick(now time.Time) []Action {
	var out []Action
	for len(e.probation) > 0 && !now.Before(e.probation[0].deadline) {
		pe := e.probation[0]
		e.probation = e.probation[1:]
		st, ok := e.get(pe.v0peer)
		if !ok || st.probationToken(pe.loc) != pe.token {
			continue // answered, left, or the session is gone
		}
		st.endProbation(pe.loc)
		st.unverify(pe.loc)
		e.put(pe.v0peer, st)
		out = append(out, Action{Kind: MarkUnverified, Peer: pe.v0peer, Locator: pe.loc, TxBytes: challengeCost(pe.loc)})
	}
	if len(e.probation) == 0 {
		e.probation = nil
	}
	e.forgetLeft(now)
	return out
}

func (e *v0Engine) NextDeadline() (time.Time, bool) {
	var next time.Time
	if len(e.probation) > 0 {
		next = e.probation[0].deadline
	}
	if len(e.left) > 0 {
		if d := e.left[0].at.Add(RecentlyVerified); next.IsZero() || d.Before(next) {
			next = d
		}
	}
	return next, !next.IsZero()
}

func (e *v0Engine) forgetLeft(now time.Time) {
	for len(e.left) > 0 && now.Sub(e.left[0].at) >= RecentlyVerified {
		x := e.left[0]
		e.left = e.left[1:]
		st, ok := e.get(x.v0peer)
		if !ok || st.rare == nil {
			continue
		}
		st.rare.left = slices.DeleteFunc(st.rare.left, func(l v0leftLoc) bool { return l.loc == x.loc && !l.at.After(x.at) })
		if len(st.rare.left) == 0 {
			st.rare.left = nil
		}
		st.tidy()
		e.put(x.v0peer, st)
	}
	if len(e.left) == 0 {
		e.left = nil // let a burst's array go
	}
}

func (st *v0peer) remember(l wire.L64, now time.Time) {
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
	r.left = append(r.left, v0leftLoc{loc: l, at: now})
}

func (st *v0peer) recentlyLeft(l wire.L64, now time.Time) bool {
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

func (e *v0Engine) challenge(p wire.NID, st *v0peer, l wire.L64, now time.Time) (Action, error) {
	var t Token
	if err := e.cfg.Random(t[:]); err != nil {
		return Action{}, fmt.Errorf("challenge for %v at %v: %w", p, l, err)
	}
	if t == (Token{}) {
		return Action{}, fmt.Errorf("challenge for %v at %v: the random source gave a zero token", p, l)
	}
	var buf [maxPending + 1]Token
	ts := st.tokens(buf[:])
	if len(ts) >= maxPending {
		delete(e.tokens, ts[0])
		ts = ts[1:]
	}
	st.setTokens(append(ts, t))
	e.tokens[t] = v0pending{v0peer: p, loc: l, expires: e.offsetOf(now.Add(e.cfg.ChallengeLifetime))}
	e.tokensPeak = max(e.tokensPeak, len(e.tokens))
	e.order = append(e.order, t)
	return Action{Kind: SendChallenge, Peer: p, Locator: l, Token: t}, nil
}

func (e *v0Engine) outstanding(st *v0peer, l wire.L64) bool {
	var buf [maxPending]Token
	for _, t := range st.tokens(buf[:]) {
		if pd, ok := e.tokens[t]; ok && pd.loc == l {
			return true
		}
	}
	return false
}

func (e *v0Engine) expire(now time.Time) {
	for len(e.order) > 0 {
		t := e.order[0]
		pd, ok := e.tokens[t]
		if ok && pd.expires >= e.offsetOf(now) {
			break
		}
		e.order = e.order[1:]
		if !ok {
			continue // answered, or dropped (maxPending, forget)
		}
		delete(e.tokens, t)
		if st, ok := e.get(pd.v0peer); ok {
			st.dropToken(t)
			e.put(pd.v0peer, st)
		}
	}
	if len(e.order) == 0 {
		e.order = nil // let a burst's array go
	}
	e.forgetLeft(now)
	if len(e.tokens) == 0 && e.tokensPeak > v0tokensFresh {
		e.tokens, e.tokensPeak = map[Token]v0pending{}, 0
	}
}

func (e *v0Engine) forget(p wire.NID) {
	st, _ := e.get(p)
	var buf [maxPending]Token
	for _, t := range st.tokens(buf[:]) {
		delete(e.tokens, t)
	}
	e.dropLone(p, -1)
	e.dropFull(p)
}
