package binding

import (
	"errors"
	"slices"
	"testing"
	"time"

	"ilnp/internal/timeline"
	"ilnp/lab/mipv6/mh"
	"ilnp/lab/mipv6/rr"
)

// counter is a deterministic "random" source.
type counter byte

func (c *counter) Read(p []byte) (int, error) {
	for i := range p {
		*c++
		p[i] = byte(*c)
	}
	return len(p), nil
}

type noEntropy struct{}

func (noEntropy) Read([]byte) (int, error) { return 0, errors.New("no entropy") }

func newCN(t *testing.T) *Correspondent {
	t.Helper()
	c := counter(100)
	cn, err := NewCorrespondent(CNConfig{Addr: cnAddr, Rand: &c, Node: "cn"})
	if err != nil {
		t.Fatal(err)
	}
	return cn
}

func newRO(t *testing.T) *RouteOptimizer {
	t.Helper()
	c := counter(0)
	o, err := NewRouteOptimizer(ROConfig{HomeAddress: hoa, Correspondent: cnAddr, Rand: &c, InitialSeq: 10, Node: "mn"})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// deliver passes every Send action of as through the wire to m and returns its actions.
func deliver(t *testing.T, as []Action, m interface {
	Event(Event, time.Time) []Action
}, now time.Time) []Action {
	t.Helper()
	var out []Action
	for _, a := range ofKind(as, Send) {
		out = append(out, m.Event(wireRoundTrip(t, a), now)...)
	}
	return out
}

func TestReturnRoutabilityAndCorrespondentRegistration(t *testing.T) {
	o, cn := newRO(t), newCN(t)
	as := o.Event(Moved{CareOf: coa}, t0)
	sends := ofKind(as, Send)
	if len(sends) != 2 {
		t.Fatalf("want HoTI and CoTI, got %+v", sends)
	}
	var hoti, coti Action
	for _, s := range sends {
		switch s.Msg.(type) {
		case *mh.HomeTestInit:
			hoti = s
		case *mh.CareOfTestInit:
			coti = s
		}
	}
	// HoTI from the home address through the reverse tunnel; CoTI straight from the CoA.
	if !hoti.ViaTunnel || hoti.Env != (mh.Envelope{Src: hoa, Dst: cnAddr}) {
		t.Fatalf("HoTI %+v tunnel=%v", hoti.Env, hoti.ViaTunnel)
	}
	if coti.ViaTunnel || coti.Env != (mh.Envelope{Src: coa, Dst: cnAddr}) {
		t.Fatalf("CoTI %+v tunnel=%v", coti.Env, coti.ViaTunnel)
	}
	if tm := one(t, as, Timer); !tm.At.Equal(t0.Add(time.Second)) {
		t.Fatalf("RR timer %v", tm.At.Sub(t0))
	}

	// The correspondent answers with tokens computed from Kcn and its nonces (s.5.2.5).
	t1 := t0.Add(30 * time.Millisecond)
	replies := deliver(t, as, cn, t1)
	if len(ofKind(replies, Send)) != 2 {
		t.Fatalf("CN replies %+v", replies)
	}
	for _, a := range ofKind(replies, Send) {
		r := wireRoundTrip(t, a)
		switch m := r.Msg.(type) {
		case *mh.HomeTest:
			n, ok := cn.nonces.Lookup(m.NonceIndex, t1)
			if !ok || m.Token != rr.HomeKeygenToken(cn.kcn, hoa, n) || m.Cookie != hoti.Msg.(*mh.HomeTestInit).Cookie {
				t.Fatalf("HoT %+v", m)
			}
			if r.Packet.Dst != hoa {
				t.Fatalf("HoT to %v, want the home address", r.Packet.Dst)
			}
		case *mh.CareOfTest:
			n, ok := cn.nonces.Lookup(m.NonceIndex, t1)
			if !ok || m.Token != rr.CareOfKeygenToken(cn.kcn, coa, n) || m.Cookie != coti.Msg.(*mh.CareOfTestInit).Cookie {
				t.Fatalf("CoT %+v", m)
			}
		default:
			t.Fatalf("CN sent %T", m)
		}
	}

	// Both tokens in: one BU to the CN with nonce indices and authorization data.
	t2 := t1.Add(30 * time.Millisecond)
	as = deliver(t, replies, o, t2)
	bu := one(t, as, Send)
	r := wireRoundTrip(t, bu)
	if r.Packet.Envelope != (mh.Envelope{Src: coa, Dst: cnAddr, HomeAddress: hoa, HopLimit: 64}) {
		t.Fatalf("BU envelope %+v", r.Packet.Envelope)
	}
	m := r.Msg.(*mh.BindingUpdate)
	if m.Home || !m.Ack || m.Seq != 11 || m.Lifetime != 105 {
		t.Fatalf("BU %+v", m)
	}
	if _, ok := mh.Find[mh.NonceIndices](m.Options); !ok {
		t.Fatal("no nonce indices")
	}
	if rec := ofKind(as, Record); len(rec) != 3 || rec[2].Event.Kind != timeline.BUSent || rec[2].Event.Peer != cnAddr.String() {
		t.Fatalf("records %+v", rec)
	}
	// The correspondent verifies it, binds and acknowledges with its own authorization data.
	t3 := t2.Add(10 * time.Millisecond)
	cnActs := cn.Event(r, t3)
	b := one(t, cnActs, Bind).Binding
	if b.HomeAddress != hoa || b.CareOf != coa || b.Lifetime != 420*time.Second {
		t.Fatalf("CN binding %+v", b)
	}
	back := wireRoundTrip(t, one(t, cnActs, Send))
	if back.Packet.Envelope != (mh.Envelope{Src: cnAddr, Dst: coa, RoutingHome: hoa, HopLimit: 64}) {
		t.Fatalf("BAck envelope %+v", back.Packet.Envelope)
	}
	if _, ok := mh.Find[mh.AuthData](back.Msg.MobilityOptions()); !ok {
		t.Fatal("CN BAck without authorization data")
	}
	t4 := t3.Add(10 * time.Millisecond)
	as = o.Event(back, t4)
	res := one(t, as, Done).Result
	if res.Err != nil || res.Elapsed != 20*time.Millisecond || res.Total != 80*time.Millisecond || res.Lifetime != 420*time.Second {
		t.Fatalf("result %+v", res)
	}
	if s, c := o.State(); s != ROBound || c != coa {
		t.Fatalf("state %v %v", s, c)
	}
	if tm := one(t, as, Timer); !tm.At.Equal(t4.Add(336 * time.Second)) {
		t.Fatalf("refresh at %v", tm.At.Sub(t4))
	}

	// The same care-of address again changes nothing.
	if as := o.Event(Moved{CareOf: coa}, t4.Add(time.Second)); len(as) != 0 {
		t.Fatalf("same care-of address restarted RO: %+v", as)
	}
	// Moving on within MAX_TOKEN_LIFETIME reuses the home token: only a CoTI goes out.
	as = o.Event(Moved{CareOf: coa2}, t4.Add(10*time.Second))
	if s := ofKind(as, Send); len(s) != 1 || s[0].Msg.Type() != mh.TypeCareOfTestInit || s[0].Env.Src != coa2 {
		t.Fatalf("second move sent %+v", s)
	}

	// A BU signed with another key is dropped silently (s.9.5.1).
	forged := &mh.BindingUpdate{Seq: 50, Ack: true, Lifetime: 10, Options: []mh.Option{m.Options[0], mh.AuthData{}}}
	body, err := rr.Sign(forged, rr.Key{1}, coa2, cnAddr, hoa, cnAddr)
	if err != nil {
		t.Fatal(err)
	}
	pkt, _ := mh.AppendPacket(nil, mh.Envelope{Src: coa2, Dst: cnAddr, HomeAddress: hoa}, mh.Proto, body)
	fr, _ := Parse(pkt)
	if as := cn.Event(fr, t4.Add(11*time.Second)); len(ofKind(as, Send)) != 0 || len(ofKind(as, Bind)) != 0 {
		t.Fatalf("forged BU gave %+v", as)
	}
	if e, _ := cn.Binding(hoa); e.CareOf != coa {
		t.Fatal("forged BU changed the binding")
	}
	if cn.Stats().BadAuth != 1 {
		t.Fatalf("stats %+v", cn.Stats())
	}
	// The genuine BU replayed: authentic but old, so 135 with the cached number.
	as = cn.Event(r, t4.Add(12*time.Second))
	if bk := wireRoundTrip(t, one(t, as, Send)).Msg.(*mh.BindingAck); bk.Status != mh.StatusSeqOutOfWindow || bk.Seq != 11 {
		t.Fatalf("replay BAck %+v", bk)
	}
}

// signedBU builds a BU from coa for hoa with the given nonce indices and key.
func signedBU(t *testing.T, seq uint16, lifetime uint16, ni mh.NonceIndices, kbm rr.Key) Received {
	t.Helper()
	bu := &mh.BindingUpdate{Seq: seq, Ack: true, Lifetime: lifetime, Options: []mh.Option{ni, mh.AuthData{}}}
	body, err := rr.Sign(bu, kbm, coa, cnAddr, hoa, cnAddr)
	if err != nil {
		t.Fatal(err)
	}
	pkt, _ := mh.AppendPacket(nil, mh.Envelope{Src: coa, Dst: cnAddr, HomeAddress: hoa}, mh.Proto, body)
	r, err := Parse(pkt)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestCorrespondentRejections(t *testing.T) {
	cn := newCN(t)
	hi, hn, _ := cn.nonces.Current(t0)
	ci, cnn, _ := cn.nonces.Current(t0.Add(100 * time.Second)) // a newer nonce (regen 30 s)
	if hi == ci {
		t.Fatal("no new nonce")
	}
	kbm := rr.BindingKey(rr.HomeKeygenToken(cn.kcn, hoa, hn), rr.CareOfKeygenToken(cn.kcn, coa, cnn))
	tests := []struct {
		name string
		r    Received
		at   time.Duration
		want mh.Status
	}{
		{"home nonce expired", signedBU(t, 1, 10, mh.NonceIndices{Home: hi, CareOf: ci}, kbm), 150 * time.Second, mh.StatusExpiredHomeNonceIndex},
		{"care-of nonce expired", signedBU(t, 1, 10, mh.NonceIndices{Home: ci, CareOf: hi}, kbm), 150 * time.Second, mh.StatusExpiredCareOfNonceIndex},
		{"both expired", signedBU(t, 1, 10, mh.NonceIndices{Home: hi, CareOf: hi}, kbm), 250 * time.Second, mh.StatusExpiredNonces},
		{"unknown index", signedBU(t, 1, 10, mh.NonceIndices{Home: 999, CareOf: ci}, kbm), 0, mh.StatusExpiredHomeNonceIndex},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			as := cn.Event(tc.r, t0.Add(100*time.Second+tc.at))
			back := wireRoundTrip(t, one(t, as, Send)).Msg.(*mh.BindingAck)
			if back.Status != tc.want || len(ofKind(as, Bind)) != 0 {
				t.Fatalf("BAck %+v", back)
			}
		})
	}
	// Valid now: accepted.
	as := cn.Event(signedBU(t, 1, 10, mh.NonceIndices{Home: hi, CareOf: ci}, kbm), t0.Add(101*time.Second))
	if b := one(t, as, Bind).Binding; b.Lifetime != 40*time.Second {
		t.Fatalf("binding %+v", b)
	}
	// Without authorization data: silently dropped.
	plain, _ := mh.AppendMessage(nil, mh.Envelope{Src: coa, Dst: cnAddr, HomeAddress: hoa}, &mh.BindingUpdate{Seq: 2, Ack: true, Lifetime: 5})
	pr, _ := Parse(plain)
	if as := cn.Event(pr, t0.Add(102*time.Second)); len(ofKind(as, Send)) != 0 {
		t.Fatalf("unauthorised BU answered: %+v", as)
	}
	// A home registration sent to a plain correspondent: 131.
	home, _ := mh.AppendMessage(nil, mh.Envelope{Src: coa, Dst: cnAddr, HomeAddress: hoa}, &mh.BindingUpdate{Seq: 3, Ack: true, Home: true, Lifetime: 5})
	hr, _ := Parse(home)
	as = cn.Event(hr, t0.Add(103*time.Second))
	if back := wireRoundTrip(t, one(t, as, Send)).Msg.(*mh.BindingAck); back.Status != mh.StatusHomeRegNotSupported {
		t.Fatalf("BAck %+v", back)
	}
	// Deregistration with the home token alone (lifetime 0).
	dk := rr.DeregistrationKey(rr.HomeKeygenToken(cn.kcn, hoa, cnn))
	as = cn.Event(signedBU(t, 4, 0, mh.NonceIndices{Home: ci, CareOf: 0xdead}, dk), t0.Add(104*time.Second))
	if u := one(t, as, Unbind).Binding; u.HomeAddress != hoa {
		t.Fatalf("unbind %+v", u)
	}
	if back := wireRoundTrip(t, one(t, as, Send)); back.Msg.(*mh.BindingAck).Status != mh.StatusAccepted || rr.Verify(dk, coa, cnAddr, back.Packet.Payload) != nil {
		t.Fatalf("deregistration BAck %+v", back.Msg)
	}
	// Binding expiry.
	as = cn.Event(signedBU(t, 5, 10, mh.NonceIndices{Home: ci, CareOf: ci}, rr.BindingKey(rr.HomeKeygenToken(cn.kcn, hoa, cnn), rr.CareOfKeygenToken(cn.kcn, coa, cnn))), t0.Add(105*time.Second))
	one(t, as, Bind)
	if as := cn.Event(Tick{}, t0.Add(145*time.Second)); len(ofKind(as, Unbind)) != 1 {
		t.Fatalf("no expiry: %+v", as)
	}
	if s := cn.Stats(); s.Unauthorised != 1 || s.Accepted != 2 || s.Deregistered != 1 || s.Expired != 1 || s.Rejected != 5 {
		t.Fatalf("stats %+v", s)
	}
}

func TestRouteOptimizerNonceErrorsAndRetransmission(t *testing.T) {
	o, cn := newRO(t), newCN(t)
	as := o.Event(Moved{CareOf: coa}, t0)
	// Lose the CoTI: only the HoTI reaches the CN.
	var hotiOnly []Action
	for _, a := range ofKind(as, Send) {
		if a.Msg.Type() == mh.TypeHomeTestInit {
			hotiOnly = append(hotiOnly, a)
		}
	}
	as = o.Event(Tick{}, t0.Add(time.Second))
	if s := ofKind(as, Send); len(s) != 2 {
		t.Fatalf("after 1 s both tests are retransmitted (no answer yet): %+v", s)
	}
	replies := deliver(t, hotiOnly, cn, t0.Add(1100*time.Millisecond))
	replies = append(replies, deliver(t, as, cn, t0.Add(1100*time.Millisecond))...)
	// The first HoT answers the old cookie, which is still the cookie of the retransmission.
	as = deliver(t, replies, o, t0.Add(1200*time.Millisecond))
	bu := one(t, as, Send)
	// The CN answers "care-of nonce expired" (simulated): the MN redoes only the CoTI.
	back := &mh.BindingAck{Status: mh.StatusExpiredCareOfNonceIndex, Seq: bu.Msg.(*mh.BindingUpdate).Seq}
	pkt, _ := mh.AppendMessage(nil, mh.Envelope{Src: cnAddr, Dst: coa, RoutingHome: hoa}, back)
	br, _ := Parse(pkt)
	as = o.Event(br, t0.Add(1300*time.Millisecond))
	if s := ofKind(as, Send); len(s) != 1 || s[0].Msg.Type() != mh.TypeCareOfTestInit {
		t.Fatalf("after 137: %+v", s)
	}
	// An unsigned "accepted" BAck is ignored.
	as = deliver(t, as, cn, t0.Add(1400*time.Millisecond))
	as = deliver(t, as, o, t0.Add(1500*time.Millisecond))
	bu = one(t, as, Send)
	fake, _ := mh.AppendMessage(nil, mh.Envelope{Src: cnAddr, Dst: coa, RoutingHome: hoa}, &mh.BindingAck{Seq: bu.Msg.(*mh.BindingUpdate).Seq, Lifetime: 100})
	fr, _ := Parse(fake)
	if as := o.Event(fr, t0.Add(1550*time.Millisecond)); len(ofKind(as, Done)) != 0 {
		t.Fatalf("unsigned BAck accepted: %+v", as)
	}
	// The BU is lost; its retransmission (new sequence number, re-signed) gets through.
	as = o.Event(Tick{}, t0.Add(2500*time.Millisecond))
	re := one(t, as, Send)
	if re.Msg.(*mh.BindingUpdate).Seq != bu.Msg.(*mh.BindingUpdate).Seq+1 {
		t.Fatal("retransmitted BU reuses its sequence number")
	}
	as = deliver(t, as, cn, t0.Add(2510*time.Millisecond))
	as = deliver(t, as, o, t0.Add(2520*time.Millisecond))
	if r := one(t, as, Done).Result; r.Err != nil || r.Attempts != 2 || r.Elapsed != 1020*time.Millisecond || r.Total != 2520*time.Millisecond {
		t.Fatalf("result %+v", r)
	}
}

func TestCorrespondentProcessingDelay(t *testing.T) {
	c := counter(7)
	cn, err := NewCorrespondent(CNConfig{Addr: cnAddr, Rand: &c, ProcessingDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	pkt, _ := mh.AppendMessage(nil, mh.Envelope{Src: coa, Dst: cnAddr}, &mh.CareOfTestInit{Cookie: mh.Cookie{1}})
	r, _ := Parse(pkt)
	as := cn.Event(r, t0)
	if len(ofKind(as, Send)) != 0 {
		t.Fatal("answered before T_CoT")
	}
	if tm := one(t, as, Timer); !tm.At.Equal(t0.Add(50 * time.Millisecond)) {
		t.Fatalf("timer %v", tm.At.Sub(t0))
	}
	as = cn.Event(Tick{}, t0.Add(50*time.Millisecond))
	if cot := wireRoundTrip(t, one(t, as, Send)).Msg.(*mh.CareOfTest); cot.Cookie != (mh.Cookie{1}) {
		t.Fatalf("CoT %+v", cot)
	}
	if tm := one(t, as, Timer); !tm.At.IsZero() {
		t.Fatalf("timer left at %v", tm.At)
	}
}

func TestRouteOptimizerGiveUpAndEntropy(t *testing.T) {
	c := counter(0)
	o, err := NewRouteOptimizer(ROConfig{HomeAddress: hoa, Correspondent: cnAddr, Rand: &c, GiveUp: true, MaxTimeout: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	as := o.Event(Moved{CareOf: coa}, now)
	var done []Action
	for i := 0; i < 10 && len(done) == 0; i++ {
		now = one(t, as, Timer).At
		as = o.Event(Tick{}, now)
		done = ofKind(as, Done)
	}
	// Tests sent at 0, 1 and 3 s (timeouts 1, 2, 4 s); the one sent with the maximum timeout
	// expires unanswered at 7 s.
	if len(done) != 1 || !errors.Is(done[0].Result.Err, ErrGaveUp) || now.Sub(t0) != 7*time.Second {
		t.Fatalf("gave up at %v: %+v", now.Sub(t0), done)
	}
	if s, _ := o.State(); s != ROIdle {
		t.Fatalf("state %v", s)
	}
	o2, _ := NewRouteOptimizer(ROConfig{HomeAddress: hoa, Correspondent: cnAddr, Rand: noEntropy{}})
	if r := one(t, o2.Event(Moved{CareOf: coa}, t0), Done).Result; r.Err == nil {
		t.Fatal("no error without entropy")
	}
}

// With FreshHomeTest every move away runs the home test again, even with a home token young
// enough to reuse: HoTI and CoTI both go out at the second move (the thesis's eq. 18 handoff).
func TestRouteOptimizerFreshHomeTest(t *testing.T) {
	for _, fresh := range []bool{false, true} {
		c := counter(0)
		o, err := NewRouteOptimizer(ROConfig{HomeAddress: hoa, Correspondent: cnAddr, Rand: &c, InitialSeq: 10, Node: "mn", FreshHomeTest: fresh})
		if err != nil {
			t.Fatal(err)
		}
		cn := newCN(t)
		now := t0
		as := o.Event(Moved{CareOf: coa}, now)
		for i := 0; i < 3 && len(ofKind(as, Send)) > 0; i++ {
			now = now.Add(10 * time.Millisecond)
			as = deliver(t, deliver(t, as, cn, now), o, now)
		}
		if s, _ := o.State(); s != ROBound {
			t.Fatalf("fresh=%v: first move ended in %v", fresh, s)
		}
		as = o.Event(Moved{CareOf: coa2}, now.Add(10*time.Second))
		var types []mh.Type
		for _, s := range ofKind(as, Send) {
			types = append(types, s.Msg.Type())
		}
		want := []mh.Type{mh.TypeCareOfTestInit}
		if fresh {
			want = []mh.Type{mh.TypeCareOfTestInit, mh.TypeHomeTestInit}
		}
		if !slices.Equal(types, want) {
			t.Errorf("fresh=%v: second move sent %v, want %v", fresh, types, want)
		}
	}
}
