%% SPDX-License-Identifier: MIT
%% What every Erlang peer shares: N from the command line, the one stdout
%% line, the checksum failure, the clock. (Not named `peer`: OTP 25 has a
%% module of that name.)
-module(bench_peer).
-export([n/2, print/4, check/3, now_ns/0]).

%% The first argument as a positive integer, or Default when there is none;
%% a bad value exits 2.
n([], Default) ->
    Default;
n([Arg | _], _) ->
    case string:to_integer(Arg) of
        {N, ""} when N > 0 -> N;
        _ ->
            io:format(standard_error, "bad N ~p~n", [Arg]),
            halt(2)
    end.

%% Writes `BENCH <Name> erlang <Value> <Unit>` with one decimal and halts.
print(Name, Value, Unit) ->
    io:format("BENCH ~s erlang ~.1f ~s~n", [Name, float(Value), Unit]),
    halt(0).

print(Name, ElapsedNs, Ops, Unit) ->
    print(Name, ElapsedNs / Ops, Unit).

%% Exits 1, printing nothing on stdout, when Ok is false.
check(true, _, _) ->
    ok;
check(false, Fmt, Args) ->
    io:format(standard_error, "checksum failed: " ++ Fmt ++ "~n", Args),
    halt(1).

now_ns() ->
    erlang:monotonic_time(nanosecond).
