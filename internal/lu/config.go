package lu

import (
	"errors"
	"fmt"
	"time"
)

// Config bounds the retransmission of Locator Updates. The zero value of a field means "use the
// default"; Validate rejects values outside the bounds below.
type Config struct {
	// InitialTimeout is the retransmission timeout before any RTT has been measured to a
	// correspondent. The thesis (s.3.2.7) and ilnp-public-1 used a fixed 1 s; we keep 1 s as
	// the starting point and adapt from measured RTTs afterwards.
	InitialTimeout time.Duration `json:"initial_timeout"`
	// MinTimeout and MaxTimeout clamp every timeout, adaptive or backed off. RFC 6298's 1 s
	// floor exists to stay clear of delayed ACKs in TCP; an LU-ACK is sent at once by the
	// receiver, so a lower floor lets a handoff on a fast path recover from one lost LU quickly.
	MinTimeout time.Duration `json:"min_timeout"`
	MaxTimeout time.Duration `json:"max_timeout"`
	// MaxAttempts is the number of transmissions (the first one included) before giving up.
	MaxAttempts int `json:"max_attempts"`
	// Backoff multiplies the timeout after each unanswered transmission.
	Backoff float64 `json:"backoff"`
	// ClockGranularity is G in RFC 6298 s.2: the smallest variance term added to SRTT.
	ClockGranularity time.Duration `json:"clock_granularity"`
}

// Defaults. 1 s x 7 attempts reproduces ilnp-public-1 before the first RTT sample; with
// doubling and an 8 s cap a silent correspondent is given up after 1+2+4+8+8+8+8 = 39 s.
const (
	DefaultInitialTimeout   = time.Second
	DefaultMinTimeout       = 50 * time.Millisecond
	DefaultMaxTimeout       = 8 * time.Second
	DefaultMaxAttempts      = 7
	DefaultBackoff          = 2.0
	DefaultClockGranularity = time.Millisecond
)

// Bounds accepted by Validate.
const (
	minTimeoutFloor   = time.Millisecond
	maxTimeoutCeiling = 10 * time.Minute
	maxAttemptsLimit  = 100
	maxBackoff        = 10.0
)

// DefaultConfig returns the defaults above.
func DefaultConfig() Config {
	return Config{
		InitialTimeout:   DefaultInitialTimeout,
		MinTimeout:       DefaultMinTimeout,
		MaxTimeout:       DefaultMaxTimeout,
		MaxAttempts:      DefaultMaxAttempts,
		Backoff:          DefaultBackoff,
		ClockGranularity: DefaultClockGranularity,
	}
}

// WithDefaults returns c with every zero field replaced by its default.
func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	if c.InitialTimeout == 0 {
		c.InitialTimeout = d.InitialTimeout
	}
	if c.MinTimeout == 0 {
		c.MinTimeout = d.MinTimeout
	}
	if c.MaxTimeout == 0 {
		c.MaxTimeout = d.MaxTimeout
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = d.MaxAttempts
	}
	if c.Backoff == 0 {
		c.Backoff = d.Backoff
	}
	if c.ClockGranularity == 0 {
		c.ClockGranularity = d.ClockGranularity
	}
	return c
}

// ErrConfig is wrapped by every error Validate returns.
var ErrConfig = errors.New("invalid LU retransmission config")

// Validate checks every field against its bounds and the fields against each other. It does
// not fill defaults: call WithDefaults first if zero means "default".
func (c Config) Validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrConfig, field, fmt.Sprintf(format, args...))
	}
	inRange := func(field string, d time.Duration) error {
		if d < minTimeoutFloor || d > maxTimeoutCeiling {
			return bad(field, "%v is outside [%v, %v]", d, minTimeoutFloor, maxTimeoutCeiling)
		}
		return nil
	}
	if err := inRange("min_timeout", c.MinTimeout); err != nil {
		return err
	}
	if err := inRange("max_timeout", c.MaxTimeout); err != nil {
		return err
	}
	if err := inRange("initial_timeout", c.InitialTimeout); err != nil {
		return err
	}
	if c.MinTimeout > c.MaxTimeout {
		return bad("min_timeout", "%v is above max_timeout %v", c.MinTimeout, c.MaxTimeout)
	}
	if c.InitialTimeout < c.MinTimeout || c.InitialTimeout > c.MaxTimeout {
		return bad("initial_timeout", "%v is outside [min_timeout %v, max_timeout %v]",
			c.InitialTimeout, c.MinTimeout, c.MaxTimeout)
	}
	if c.MaxAttempts < 1 || c.MaxAttempts > maxAttemptsLimit {
		return bad("max_attempts", "%d is outside [1, %d]", c.MaxAttempts, maxAttemptsLimit)
	}
	// NaN fails both comparisons, so test for the accepted range rather than the rejected one.
	if !(c.Backoff >= 1 && c.Backoff <= maxBackoff) {
		return bad("backoff", "%v is outside [1, %v]", c.Backoff, maxBackoff)
	}
	if c.ClockGranularity < 0 || c.ClockGranularity > c.MaxTimeout {
		return bad("clock_granularity", "%v is outside [0, max_timeout %v]", c.ClockGranularity, c.MaxTimeout)
	}
	return nil
}
