module microview.io/writers/go

go 1.19
