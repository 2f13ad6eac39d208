package analysis

import (
	"math"
	"time"
)

// RTOPolicy is an adaptive retransmission timer for the LU sender, after
// RFC 6298: with one RTT sample R, SRTT = R and RTTVAR = R/2 (s. 2.2), so
// RTO = SRTT + max(G, K·RTTVAR) = R + max(G, 2R), multiplied by Backoff
// after every timeout (s. 5.5) and then clamped to [Min, Max] (s. 2.4-2.5),
// in that order as our LU engine does. The thesis instead uses a fixed
// Δ_I = 1 s (§6.3.3).
type RTOPolicy struct {
	Initial     time.Duration // RTO with no RTT sample (RFC 6298 s. 2.1: 1 s)
	Min, Max    time.Duration // clamp; TCP's 1 s floor would undo the point of adapting
	K           float64       // RTTVAR multiplier, 4 in RFC 6298
	G           time.Duration // clock granularity
	Backoff     float64       // multiplier per timeout, 2 in RFC 6298
	MaxAttempts int           // transmissions of one LU, including the first
}

// DefaultRTOPolicy mirrors the defaults of our LU engine (internal/lu
// DefaultConfig): RFC 6298 constants, a 50 ms floor (an LU-ACK is not
// delayed like a TCP ACK, so TCP's 1 s floor is not needed), an 8 s cap,
// 1 s before any RTT sample and 7 transmissions, as ilnp-public-1 (1 s x 7).
func DefaultRTOPolicy() RTOPolicy {
	return RTOPolicy{
		Initial:     time.Second,
		Min:         50 * time.Millisecond,
		Max:         8 * time.Second,
		K:           4,
		G:           time.Millisecond,
		Backoff:     2,
		MaxAttempts: 7,
	}
}

// raw is the unclamped RTO: Initial without a sample, else R + max(G, K·R/2).
func (p RTOPolicy) raw(estimate time.Duration) time.Duration {
	if estimate <= 0 {
		return p.Initial
	}
	rttvar := float64(estimate) / 2
	return estimate + max(p.G, time.Duration(p.K*rttvar))
}

// RTO is the first retransmission timeout given the RTT estimate for the
// correspondent; estimate <= 0 means no sample yet.
func (p RTOPolicy) RTO(estimate time.Duration) time.Duration {
	return p.clamp(float64(p.raw(estimate)))
}

// clamp bounds a timeout to [Min, Max]; as in the engine, the floor and cap
// apply after backing off, so a sub-floor RTO stays at the floor for the
// first few retransmissions instead of doubling from it.
func (p RTOPolicy) clamp(d float64) time.Duration {
	if p.Max > 0 && d > float64(p.Max) {
		return p.Max
	}
	if d > math.MaxInt64/2 {
		d = math.MaxInt64 / 2
	}
	return max(time.Duration(d), p.Min)
}

// Schedule lists the waits before each retransmission: MaxAttempts-1
// timeouts, wait k = clamp(raw RTO · Backoff^k).
func (p RTOPolicy) Schedule(estimate time.Duration) []time.Duration {
	if p.MaxAttempts < 2 {
		return nil
	}
	waits := make([]time.Duration, p.MaxAttempts-1)
	raw := float64(p.raw(estimate))
	backoff := max(p.Backoff, 1)
	for k := range waits {
		waits[k] = p.clamp(raw * math.Pow(backoff, float64(k)))
	}
	return waits
}

// FixedSchedule is the thesis's timer: the same delta before every
// retransmission, attempts transmissions in all.
func FixedSchedule(delta time.Duration, attempts int) []time.Duration {
	if attempts < 2 {
		return nil
	}
	waits := make([]time.Duration, attempts-1)
	for i := range waits {
		waits[i] = delta
	}
	return waits
}

// WithAdaptiveLU returns in with Δ_I replaced by the policy's first timeout
// for the given RTT estimate, so HandoffDelay and Interruption give the
// single-loss rows of Tables 6.3/6.4 under the adaptive timer.
func (in Inputs) WithAdaptiveLU(p RTOPolicy, estimate time.Duration) Inputs {
	in.DeltaI = p.RTO(estimate)
	return in
}

// OldPathRTTMNCN is the MN-CN RTT before the handoff, the only sample an
// LU sender can have when it sends the first LU. The thesis gives RTTs
// only after the handoff; by the same figures we assume 5 ms when the MN
// leaves a LAN and 200 ms when it leaves a WAN.
func OldPathRTTMNCN(s Scenario) time.Duration {
	switch s {
	case LANtoLAN, LANtoWAN:
		return 5 * time.Millisecond
	default:
		return 200 * time.Millisecond
	}
}

// RetryOutcome summarises an exchange retransmitted on a schedule when each
// attempt independently completes with probability p.
type RetryOutcome struct {
	PSuccess  float64       // probability that some attempt completes
	MeanDelay time.Duration // expected handoff delay given success
	MaxDelay  time.Duration // delay if only the last attempt completes
	// MeanTransmissions is the expected number of LUs sent: every attempt
	// whose timer fires before the first answer arrives, all of them when
	// none completes. Above 1 + (attempts lost) it counts spurious
	// retransmissions of a timer shorter than the RTT.
	MeanTransmissions float64
}

// Retry evaluates the exchange: if attempt k (0-based) is the first to
// complete, the handoff delay is the sum of the first k waits plus base
// (RTT + processing). The first completing attempt in sending order always
// answers first because every attempt sees the same path, so this holds
// even when a wait is shorter than the RTT.
func Retry(p float64, waits []time.Duration, base time.Duration) RetryOutcome {
	var out RetryOutcome
	n := len(waits) + 1
	send := make([]time.Duration, n) // send[i]: when attempt i leaves
	for i := 1; i < n; i++ {
		send[i] = send[i-1] + waits[i-1]
	}
	var mean float64
	fail := 1.0 // probability that attempts 0..k-1 all failed
	for k := range n {
		pk := fail * p
		answer := send[k] + base
		sent := k + 1
		for sent < n && send[sent] < answer {
			sent++
		}
		out.PSuccess += pk
		mean += pk * float64(answer)
		out.MeanTransmissions += pk * float64(sent)
		fail *= 1 - p
	}
	out.MeanTransmissions += fail * float64(n)
	out.MaxDelay = send[n-1] + base
	if out.PSuccess > 0 {
		out.MeanDelay = time.Duration(mean / out.PSuccess)
	}
	return out
}
