package ilcc

import (
	"slices"
	"sort"
	"time"
)

// Quality is the measured quality of the paths through a local locator: the lowest probe RTT
// and loss among its locator pairs (internal/paths).
type Quality struct {
	Measured bool
	RTT      time.Duration
	Loss     float64 // 0..1
}

// Hysteresis of ByQuality: another locator replaces the current one only when it is clearly
// better, so that measurement noise does not send an LU every second.
const (
	qualityRTTFactor = 1.25                 // the other's RTT times this is below the current's
	qualityLossStep  = 0.05                 // or its loss is lower by this much
	qualityRTTMin    = 2 * time.Millisecond // and its RTT lower by at least this much
)

// ByQuality uses the locator whose paths measured the lowest loss, then the lowest RTT
// (issue 16's "quality" policy). Unmeasured locators rank after measured ones, newest first;
// deprecated ones last. The current locator stays first unless another is clearly better.
type ByQuality struct{}

func (ByQuality) Name() string { return "quality" }

func (ByQuality) Order(cands []Candidate) []Candidate {
	out := slices.Clone(cands)
	sort.SliceStable(out, func(i, j int) bool { return qualityLess(out[i], out[j]) })
	if len(out) < 2 || out[0].Current {
		return out
	}
	cur := slices.IndexFunc(out, func(c Candidate) bool { return c.Current })
	if cur < 0 || out[cur].Deprecated || out[0].Deprecated != out[cur].Deprecated || !out[cur].Quality.Measured {
		return out
	}
	if clearlyBetter(out[0].Quality, out[cur].Quality) {
		return out
	}
	c := out[cur]
	out = slices.Delete(out, cur, cur+1)
	return slices.Insert(out, 0, c)
}

func qualityLess(a, b Candidate) bool {
	if a.Deprecated != b.Deprecated {
		return !a.Deprecated
	}
	qa, qb := a.Quality, b.Quality
	if qa.Measured != qb.Measured {
		return qa.Measured
	}
	if qa.Measured {
		if qa.Loss != qb.Loss {
			return qa.Loss < qb.Loss
		}
		if qa.RTT != qb.RTT {
			return qa.RTT < qb.RTT
		}
	}
	if !a.Learned.Equal(b.Learned) {
		return a.Learned.After(b.Learned)
	}
	return a.Locator < b.Locator
}

func clearlyBetter(a, b Quality) bool {
	if !a.Measured {
		return false
	}
	if b.Loss-a.Loss >= qualityLossStep {
		return true
	}
	return a.Loss <= b.Loss && float64(a.RTT)*qualityRTTFactor < float64(b.RTT) && b.RTT-a.RTT >= qualityRTTMin
}

// Multipath ranks like Newest (the newest locator is active and carries what is not spread:
// LUs, ICMPv6, new sessions); the daemon spreads each session's flows over all its live
// locator pairs in the datapath (issue 16's "multipath").
type Multipath struct{ Newest }

func (Multipath) Name() string { return "multipath" }
