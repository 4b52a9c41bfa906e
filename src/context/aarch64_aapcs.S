/* SPDX-License-Identifier: MIT */
/*
 * Context switch for AArch64, AAPCS64.
 *
 * void weft__ctx_jump(void **save_sp, void *to_sp)
 *   Saves the callee-saved registers x19-x28, the frame pointer x29, the
 *   link register x30, the low halves d8-d15 of v8-v15 and FPCR in a
 *   176-byte frame on the current stack, stores sp in *save_sp, restores
 *   the same set from to_sp and branches to the restored x30.
 *
 * Frame, from the saved stack pointer up (bytes):
 *   0 x19 x20 | 16 x21 x22 | 32 x23 x24 | 48 x25 x26 | 64 x27 x28
 *   80 x29 x30 | 96 d8 d9 | 112 d10 d11 | 128 d12 d13 | 144 d14 d15
 *   160 FPCR | 168 padding
 *
 * A new context has x19 = entry, x20 = argument and x30 = weft__ctx_start.
 */
    .text
    .globl weft__ctx_jump
    .hidden weft__ctx_jump
    .type weft__ctx_jump, %function
    .p2align 4
weft__ctx_jump:
    sub sp, sp, #176
    stp x19, x20, [sp, #0]
    stp x21, x22, [sp, #16]
    stp x23, x24, [sp, #32]
    stp x25, x26, [sp, #48]
    stp x27, x28, [sp, #64]
    stp x29, x30, [sp, #80]
    stp d8, d9, [sp, #96]
    stp d10, d11, [sp, #112]
    stp d12, d13, [sp, #128]
    stp d14, d15, [sp, #144]
    mrs x9, fpcr
    str x9, [sp, #160]
    mov x9, sp
    str x9, [x0]
.Lresume:
    mov sp, x1
    ldp x19, x20, [sp, #0]
    ldp x21, x22, [sp, #16]
    ldp x23, x24, [sp, #32]
    ldp x25, x26, [sp, #48]
    ldp x27, x28, [sp, #64]
    ldp x29, x30, [sp, #80]
    ldp d8, d9, [sp, #96]
    ldp d10, d11, [sp, #112]
    ldp d12, d13, [sp, #128]
    ldp d14, d15, [sp, #144]
    ldr x9, [sp, #160]
    msr fpcr, x9
    add sp, sp, #176
    br x30
    .size weft__ctx_jump, .-weft__ctx_jump

    /* void weft__ctx_exit(void *to_sp): weft__ctx_jump's second half
     * alone, for a context that will never run again (a finished task):
     * nothing of it is saved. */
    .globl weft__ctx_exit
    .hidden weft__ctx_exit
    .type weft__ctx_exit, %function
    .p2align 4
weft__ctx_exit:
    mov x1, x0
    b .Lresume
    .size weft__ctx_exit, .-weft__ctx_exit

    .globl weft__ctx_start
    .hidden weft__ctx_start
    .type weft__ctx_start, %function
    .p2align 4
weft__ctx_start:
    mov x0, x20
    blr x19
    brk #0
    .size weft__ctx_start, .-weft__ctx_start

    .section .note.GNU-stack,"",%progbits
