//go:build docscheck_deps

// This file is never built: it holds the packages the guides import, so
// that go mod tidy keeps them in go.mod and the test can load their export
// data with go list.
package docscheck

import (
	_ "github.com/baton-go/baton"
	_ "github.com/baton-go/baton/adapter/batonlock"
	_ "github.com/baton-go/baton/adapter/gocronlock"
	_ "github.com/baton-go/baton/adapter/logrbridge"
	_ "github.com/baton-go/baton/backend"
	_ "github.com/baton-go/baton/batonprom"
	_ "github.com/baton-go/baton/batontest"
	_ "github.com/baton-go/baton/etcdstore"
	_ "github.com/baton-go/baton/fence"
	_ "github.com/baton-go/baton/filestore"
	_ "github.com/baton-go/baton/kubestore"
	_ "github.com/baton-go/baton/memstore"
	_ "github.com/baton-go/baton/redisstore"
	_ "github.com/baton-go/baton/schedule"
	_ "github.com/go-co-op/gocron/v2"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/redis/go-redis/v9"
	_ "go.etcd.io/etcd/client/v3"
	_ "k8s.io/client-go/rest"
	_ "sigs.k8s.io/controller-runtime"
)
