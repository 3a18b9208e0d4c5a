module github.com/baton-go/baton/redisstore

go 1.26.0

replace (
	github.com/baton-go/baton => ..
	github.com/baton-go/baton/internal/testenv => ../internal/testenv
)

require github.com/baton-go/baton v0.0.0-00010101000000-000000000000

require (
	github.com/baton-go/baton/internal/testenv v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.23.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
)

require golang.org/x/sys v0.50.0 // indirect
