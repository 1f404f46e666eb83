module microview.io/bench/writers

go 1.19

require (
	github.com/prometheus/client_golang v1.14.0
	microview.io/writers/go v0.0.0
	microview.io/writers/go/prometheus v0.0.0
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.1.2 // indirect
	github.com/davecgh/go-spew v1.1.1 // indirect
	github.com/golang/protobuf v1.5.2 // indirect
	github.com/matttproud/golang_protobuf_extensions v1.0.1 // indirect
	github.com/prometheus/client_model v0.3.0 // indirect
	github.com/prometheus/common v0.37.0 // indirect
	github.com/prometheus/procfs v0.8.0 // indirect
	golang.org/x/sys v0.0.0-20220520151302-bc2c85ada10a // indirect
	google.golang.org/protobuf v1.28.1 // indirect
)

replace (
	microview.io/writers/go => ../../../writers/go
	microview.io/writers/go/prometheus => ../../../writers/go/prometheus
)
