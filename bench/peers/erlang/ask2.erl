%% SPDX-License-Identifier: MIT
%% ask2: the ask benchmark (ask.erl) with Erlang's defaults: one scheduler
%% per CPU. Value: elapsed / N, ns/ask.
-module(ask2).
-export([main/0, main/1]).

main() -> main([]).
main(Args) -> ask:run("ask2", bench_peer:n(Args, 1000000)).
