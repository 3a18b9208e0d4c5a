package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"
)

// renewSend (run by renewHedged, the Store's renewBatcher.send) renews a
// batch of locks and answers each call with what the single-lock
// renewScript would have told it (renewed; ErrLost naming the new holder,
// or the lock free; a corrupt record), so batching changes the number of
// requests, not any outcome.
//
// A batch of one runs renewScript itself. A larger batch is grouped by
// where its keys live (renewGroups) and sent as one renewManyScript per
// group, all in one pipeline: on one server (or a Sentinel primary) that is
// one script per 250 locks; on a Cluster, whose scripts may only touch keys
// of one hash slot and where each lock name is its own hash tag, it is one
// script per slot, so there batching saves round trips, not commands.
//
// With WithReplicaAcks, the scripts of one server run on one connection
// followed by one WAIT, which covers all of them; a renewal that too few
// replicas acknowledged fails (a renewal a failover could lose is no
// renewal).
func (s *Store) renewSend(ctx context.Context, calls []*renewCall) {
	if len(calls) == 1 {
		c := calls[0]
		c.done <- s.owned1(ctx, renewScript, "renew", c.g)
		return
	}
	groups := s.renewGroups(calls)
	if s.acks == 0 {
		answer(groups, s.runRenewals(ctx, s.client, groups))
		return
	}
	var wg sync.WaitGroup
	for node, gs := range s.renewNodes(ctx, groups) {
		wg.Go(func() { answer(gs, s.runAcked(ctx, node, gs)) })
	}
	wg.Wait()
}

// answer sends each call of groups its error in errs (aligned with groups).
func answer(groups [][]*renewCall, errs [][]error) {
	for i, g := range groups {
		for j, c := range g {
			c.done <- errs[i][j]
		}
	}
}

// renewGroups splits calls into groups that one script may renew: all of
// them on one server; one group per hash slot on a Cluster; one per lock
// on other clients (a Ring shards by key, so a script must not mix
// locks). Groups have at most maxRenewsPerScript calls.
func (s *Store) renewGroups(calls []*renewCall) [][]*renewCall {
	var groups [][]*renewCall
	switch s.client.(type) {
	case *redis.Client:
		groups = [][]*renewCall{calls}
	case *redis.ClusterClient:
		slot := map[uint16]int{} // slot -> index in groups
		for _, c := range calls {
			n := slotOf(c.g.Key)
			i, ok := slot[n]
			if !ok {
				i = len(groups)
				slot[n] = i
				groups = append(groups, nil)
			}
			groups[i] = append(groups[i], c)
		}
	default:
		for _, c := range calls {
			groups = append(groups, []*renewCall{c})
		}
	}
	var out [][]*renewCall
	for _, g := range groups {
		for len(g) > maxRenewsPerScript {
			out = append(out, g[:maxRenewsPerScript])
			g = g[maxRenewsPerScript:]
		}
		out = append(out, g)
	}
	return out
}

// slotOf returns the Redis Cluster hash slot of lock name's keys: CRC16
// (XMODEM) of the hash tag, which is the name (keys are
// <prefix>{<name>}:..., and neither the prefix nor a valid name contains a
// brace), modulo 16384.
func slotOf(name string) uint16 {
	var crc uint16
	for i := range len(name) {
		crc ^= uint16(name[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

// renewNodes groups the groups by the server that serves them, for
// WithReplicaAcks. A group whose server cannot be found is answered with
// that error at once.
func (s *Store) renewNodes(ctx context.Context, groups [][]*renewCall) map[*redis.Client][][]*renewCall {
	nodes := map[*redis.Client][][]*renewCall{}
	for _, g := range groups {
		node, err := s.primary(ctx, s.lockKey(g[0].g.Key))
		if err != nil {
			for _, c := range g {
				c.done <- s.wrap(c.g.Key, s.lockKey(c.g.Key), "renew", err)
			}
			continue
		}
		nodes[node] = append(nodes[node], g)
	}
	return nodes
}

// runAcked renews groups on one connection to node, then waits for the
// replicas to acknowledge them; a renewal they did not acknowledge fails.
func (s *Store) runAcked(ctx context.Context, node *redis.Client, groups [][]*renewCall) [][]error {
	conn := node.Conn()
	defer func() { _ = conn.Close() }()
	errs := s.runRenewals(ctx, conn, groups)
	renewed := func(e []error) bool { return slices.Contains(e, nil) }
	if !slices.ContainsFunc(errs, renewed) {
		return errs // nothing written: nothing to wait for
	}
	ackErr := s.awaitAcks(ctx, conn)
	if ackErr == nil {
		return errs
	}
	for i, g := range groups {
		for j, c := range g {
			if errs[i][j] == nil {
				errs[i][j] = s.wrap(c.g.Key, s.lockKey(c.g.Key), "renew", ackErr)
			}
		}
	}
	return errs
}

// lockKey returns the lock key of lock name (see Store.Keys), without
// touching the Store's cache of the last lock's keys.
func (s *Store) lockKey(name string) string { return s.keyBase(name) + "lock" }

// pipeliner is a client, or a connection, that can pipeline commands.
type pipeliner interface {
	Pipeline() redis.Pipeliner
}

// runRenewals runs one renewManyScript per group, all in one pipeline on
// p (again with EVAL for those the server had not cached), and returns
// each call's outcome, aligned with groups.
func (s *Store) runRenewals(ctx context.Context, p pipeliner, groups [][]*renewCall) [][]error {
	keys := make([][]string, len(groups))
	args := make([][]any, len(groups))
	cmds := make([]*redis.Cmd, len(groups))
	pipe := p.Pipeline()
	for i, g := range groups {
		keys[i], args[i] = s.renewManyArgs(g)
		cmds[i] = renewManyScript.EvalSha(ctx, pipe, keys[i], args[i]...)
	}
	_, _ = pipe.Exec(ctx) // each command keeps its own error
	var retry redis.Pipeliner
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			if retry == nil {
				retry = p.Pipeline()
			}
			cmds[i] = renewManyScript.Eval(ctx, retry, keys[i], args[i]...)
		}
	}
	if retry != nil {
		_, _ = retry.Exec(ctx)
	}
	errs := make([][]error, len(groups))
	for i, g := range groups {
		errs[i] = s.renewManyOutcomes(g, cmds[i])
	}
	return errs
}

// renewManyArgs returns renewManyScript's KEYS and ARGV for calls.
func (s *Store) renewManyArgs(calls []*renewCall) ([]string, []any) {
	keys := make([]string, 0, 2*len(calls))
	args := make([]any, 0, 2*len(calls))
	for _, c := range calls {
		base := s.keyBase(c.g.Key)
		keys = append(keys, base+"lock", base+"fence")
		args = append(args, ownerArg(c.g.Holder, c.g.Nonce), millis(c.g.TTL))
	}
	return keys, args
}

// renewManyOutcomes reads renewManyScript's reply: one outcome per call.
func (s *Store) renewManyOutcomes(calls []*renewCall, cmd *redis.Cmd) []error {
	errs := make([]error, len(calls))
	v, err := cmd.Slice()
	for i, c := range calls {
		lock := s.lockKey(c.g.Key)
		switch {
		case err != nil:
			errs[i] = s.wrap(c.g.Key, lock, "renew", err)
		case len(v) != len(calls):
			errs[i] = fmt.Errorf("redisstore: lock %q (key %s): unexpected script reply: %d results for %d locks", c.g.Key, lock, len(v), len(calls))
		default:
			errs[i] = s.renewOutcome(c.g.Key, lock, v[i])
		}
	}
	return errs
}

// renewOutcome reads one lock's result in renewManyScript's reply: {1,
// token} renewed; {0, holder, token} another owner's, {0, "", 0} free;
// {2, error} the error renewScript would have returned.
func (s *Store) renewOutcome(name, lock string, v any) error {
	a, _ := v.([]any)
	rep := reply{v: a}
	switch rep.int(0) {
	case 0:
	case 1:
		return rep.check(s, name, lock, len(a) == 2)
	case 2:
		msg := rep.str(1)
		if err := rep.check(s, name, lock, len(a) == 2); err != nil {
			return err
		}
		return s.wrap(name, lock, "renew", errors.New(msg))
	default:
		return rep.check(s, name, lock, false)
	}
	holder, token := rep.str(1), rep.uint(2)
	if err := rep.check(s, name, lock, len(a) == 3); err != nil {
		return err
	}
	return lostError("renew", name, lock, holder, token)
}
