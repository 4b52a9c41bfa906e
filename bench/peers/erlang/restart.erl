%% SPDX-License-Identifier: MIT
%% restart: the primitive under an OTP supervisor's restart, without its
%% logging: the main process traps exits and N times spawn_links a child
%% that exits at once with reason `crash`, then waits for its 'EXIT'; the
%% failures seen are counted and checked == N. One scheduler (erl +S 1:1).
%% Value: elapsed / N, ns/restart.
-module(restart).
-export([main/0, main/1]).

main() -> main([]).
main(Args) ->
    N = bench_peer:n(Args, 100000),
    process_flag(trap_exit, true),
    T0 = bench_peer:now_ns(),
    Failures = restarts(N, 0),
    Elapsed = bench_peer:now_ns() - T0,
    bench_peer:check(Failures =:= N, "~p failures /= ~p", [Failures, N]),
    bench_peer:print("restart", Elapsed, N, "ns/restart").

restarts(0, Failures) ->
    Failures;
restarts(K, Failures) ->
    Child = spawn_link(fun() -> exit(crash) end),
    receive
        {'EXIT', Child, crash} -> restarts(K - 1, Failures + 1);
        {'EXIT', Child, _} -> restarts(K - 1, Failures)
    end.
