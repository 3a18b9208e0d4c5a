package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/baton-go/baton/redisstore"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
)

// roundTripReads is how many reads the round trip row times, after the
// store row's read paid for opening the connections; it keeps the fastest.
const roundTripReads = 3

// roundTripCheck times reads of the lock name (on Redlock, each server's
// PINGs: see redlockRoundTrip) and judges the fastest against the timing
// flags: a holder sends a renew every renew interval,
// and it must be answered before the renew deadline (the row fails if
// that leaves less than two round trips: one answer and one retry); one
// with no answer after a retry period is reported as failed (the row
// warns). A store too far away for the timings makes holders step down
// and acquire again, over and over.
func roundTripCheck(ctx context.Context, st store, name string, f *lockFlags) check {
	ctx, cancel := context.WithTimeout(ctx, f.connectTimeout)
	defer cancel()
	var (
		rtt, slowest time.Duration // slowest: of a Redlock's servers
		measured     string
		err          error
	)
	if f.backend == "redlock" {
		rtt, slowest, measured, err = f.redlockRoundTrip(ctx)
	} else {
		rtt, measured, err = readRoundTrip(ctx, st, name)
	}
	if err != nil {
		return check{"round trip", resultSkip, "not measured: " + err.Error(), ""}
	}
	deadline, retry, interval := f.timings()
	switch {
	case 2*rtt >= deadline-interval:
		return check{"round trip", resultFail, fmt.Sprintf(
			"%s: a renew, sent %v after the last, has less than two round trips before the renew deadline %v, so one slow answer or lost packet ends the lease: holders step down and acquire again (baton run), or have their grants refused as late",
			measured, interval, deadline), f.roundTripFix(rtt)}
	case rtt > retry:
		return check{"round trip", resultWarn, fmt.Sprintf(
			"%s, longer than the retry period %v: every renewal is reported as failed (a warning each time) before its answer comes, and a failed one can hardly be retried before the renew deadline %v",
			measured, retry, deadline), f.roundTripFix(rtt)}
	case slowest > rtt+f.ttl/10:
		return check{"round trip", resultWarn, fmt.Sprintf(
			"%s: the slowest server answers more than a tenth of the TTL (%v) after the quorum, so every acquire and renewal counts it as failed (degraded warnings), and one more failure leaves no quorum",
			measured, f.ttl/10), fmt.Sprintf("give --ttl %v or more (10 of that server's round trips), leaving out --renew-deadline and --retry-period so that they scale with it; or replace that server by one as near as the others", tenRoundTrips(slowest))}
	}
	return check{"round trip", resultPass, fmt.Sprintf("%s, within the retry period %v", measured, retry), ""}
}

// readRoundTrip times roundTripReads reads of the lock name and returns
// the fastest, with a description of what was measured.
func readRoundTrip(ctx context.Context, st store, name string) (time.Duration, string, error) {
	var rtt time.Duration
	for i := range roundTripReads {
		start := time.Now()
		if _, err := st.Get(ctx, name); err != nil && !errors.Is(err, backend.ErrNotFound) {
			return 0, "", fmt.Errorf("read %d of %d failed: %w", i+1, roundTripReads, err)
		}
		if d := time.Since(start); i == 0 || d < rtt {
			rtt = d
		}
	}
	return rtt, fmt.Sprintf("the store answers a read in %v (the fastest of %d)", rtt.Round(10*time.Microsecond), roundTripReads), nil
}

// redlockRoundTrip times each Redlock server (the fastest of
// roundTripReads PINGs, after one that opens the connection) and returns
// the quorum's round trip, within which a majority answers (what an
// acquire or a renewal waits for: a slower server is waited for a tenth of
// the TTL more, then counted as failed), and the slowest server's that
// answered.
func (f *lockFlags) redlockRoundTrip(ctx context.Context) (quorumRTT, slowest time.Duration, measured string, err error) {
	tlsFn := f.redisTLS()
	rtts := make([]time.Duration, 0, len(f.redisURLs))
	shown := make([]string, 0, len(f.redisURLs))
	for _, u := range f.redisURLs {
		rtt, err := pingRoundTrip(ctx, u, tlsFn)
		if err != nil {
			shown = append(shown, fmt.Sprintf("%s: no answer", redactURL(u)))
			continue
		}
		rtts = append(rtts, rtt)
		shown = append(shown, fmt.Sprintf("%s: %v", redactURL(u), rtt.Round(10*time.Microsecond)))
	}
	quorum := len(f.redisURLs)/2 + 1
	if len(rtts) < quorum {
		return 0, 0, "", fmt.Errorf("fewer than a quorum of %d servers answered a PING (%s)", quorum, strings.Join(shown, ", "))
	}
	slices.Sort(rtts)
	quorumRTT = rtts[quorum-1]
	return quorumRTT, rtts[len(rtts)-1], fmt.Sprintf("a quorum of %d servers answers in %v (each server's fastest of %d PINGs: %s)",
		quorum, quorumRTT.Round(10*time.Microsecond), roundTripReads, strings.Join(shown, ", ")), nil
}

// pingRoundTrip returns the fastest of roundTripReads PINGs of the server
// at rawURL, after one that opens the connection.
func pingRoundTrip(ctx context.Context, rawURL string, tlsFn redisstore.Option) (time.Duration, error) {
	client, err := questionClient(rawURL, tlsFn)
	if err != nil {
		return 0, err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, redisCheckTimeout)
	defer cancel()
	var rtt time.Duration
	for i := range roundTripReads + 1 {
		start := time.Now()
		if err := client.Ping(ctx).Err(); err != nil {
			return 0, err
		}
		if d := time.Since(start); i == 1 || i > 1 && d < rtt {
			rtt = d
		}
	}
	return rtt, nil
}

// roundTripFix is the fix for a round trip rtt that is too long for the
// timing flags: a TTL of 10 round trips, the others in their default
// proportions of it (or, where the TTL is that long already, a longer
// retry period).
func (f *lockFlags) roundTripFix(rtt time.Duration) string {
	ttl := tenRoundTrips(rtt)
	if ttl <= f.ttl {
		return "give a --retry-period longer than the round trip, or leave it out (2/15 of --ttl), and a --renew-deadline of many round trips; or run baton nearer the store"
	}
	return fmt.Sprintf("give --ttl %v or more (10 round trips), leaving out --renew-deadline and --retry-period so that they scale with it; or run baton nearer the store", ttl)
}

// tenRoundTrips is the TTL to advise for a round trip rtt: ten of them,
// rounded up to whole seconds, within baton's limits.
func tenRoundTrips(rtt time.Duration) time.Duration {
	return min(max(baton.MinTTL, (10*rtt+time.Second-1).Truncate(time.Second)), baton.MaxTTL)
}
