package analysis_test

import (
	"testing"

	"ilnp/internal/lu"
	"ilnp/lab/analysis"
)

// TestDefaultRTOPolicyMatchesEngine keeps the analysis's "our timer" equal
// to the LU engine's shipped defaults, so the report never describes a
// policy the product does not run.
func TestDefaultRTOPolicyMatchesEngine(t *testing.T) {
	c := lu.DefaultConfig()
	p := analysis.DefaultRTOPolicy()
	if p.Initial != c.InitialTimeout || p.Min != c.MinTimeout || p.Max != c.MaxTimeout ||
		p.MaxAttempts != c.MaxAttempts || p.Backoff != c.Backoff || p.G != c.ClockGranularity {
		t.Errorf("analysis policy %+v differs from lu.DefaultConfig %+v", p, c)
	}
}
