module github.com/baton-go/baton/adapter/gocronlock

go 1.26.0

replace (
	github.com/baton-go/baton => ../..
	github.com/baton-go/baton/internal/testenv => ../../internal/testenv
	github.com/baton-go/baton/redisstore => ../../redisstore
)

require github.com/baton-go/baton v0.0.0-00010101000000-000000000000

require (
	github.com/baton-go/baton/internal/testenv v0.0.0-00010101000000-000000000000
	github.com/baton-go/baton/redisstore v0.0.0-00010101000000-000000000000
	github.com/go-co-op/gocron/v2 v2.21.2
	github.com/google/uuid v1.6.0
	github.com/redis/go-redis/v9 v9.23.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/jonboulle/clockwork v0.5.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
)

require (
	github.com/robfig/cron/v3 v3.0.1 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
