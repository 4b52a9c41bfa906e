module weft.bench/peers

go 1.19
