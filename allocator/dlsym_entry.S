// dlsym and dlvsym as libmemtrace.so exports them (Note [Interposing dlsym] in
// allocator/lookup_hooks.cpp).
//
// glibc's dlsym answers RTLD_NEXT and RTLD_DEFAULT relative to the object that called it,
// which it finds from its return address. So for those two handles these stubs jump to the
// real function, leaving the caller's return address in place: a C function that called it
// would make every such lookup look as if libmemtrace.so had asked (RTLD_NEXT would skip the
// wrong objects; RTLD_DEFAULT from a library loaded RTLD_LOCAL would lose that library's own
// dependencies). A real handle does not depend on the caller: memtrace_dlsym_with_handle, in
// C++, asks the real dlsym and may hand back a hook instead.
//
// x86-64 only (the platform libmemtrace.so is built and tested for); elsewhere the file is
// empty and dlsym is not interposed.
#if defined(__x86_64__)

        .hidden memtrace_real_dlsym
        .hidden memtrace_real_dlvsym
        .hidden memtrace_resolve_dlsym
        .hidden memtrace_resolve_dlvsym
        .hidden memtrace_dlsym_with_handle
        .hidden memtrace_dlvsym_with_handle

        .text

// The stub of `name`: RTLD_DEFAULT (0) and RTLD_NEXT (-1) jump to the real function (found
// by `resolve` the first time, its address kept in `real`), any other handle to `with_handle`.
// The arguments (handle, name and dlvsym's version: %rdi, %rsi, %rdx) are kept across the
// call to `resolve`; after three pushes the stack is 16-byte aligned for it again.
        .macro  LOOKUP_STUB name, real, resolve, with_handle
        .globl  \name
        .type   \name, @function
        .p2align 4
\name:
        .cfi_startproc
        endbr64
        testq   %rdi, %rdi
        je      1f
        cmpq    $-1, %rdi
        je      1f
        jmp     \with_handle
1:      movq    \real(%rip), %rax
        testq   %rax, %rax
        je      2f
        jmp     *%rax
2:      pushq   %rdi
        .cfi_adjust_cfa_offset 8
        pushq   %rsi
        .cfi_adjust_cfa_offset 8
        pushq   %rdx
        .cfi_adjust_cfa_offset 8
        call    \resolve
        popq    %rdx
        .cfi_adjust_cfa_offset -8
        popq    %rsi
        .cfi_adjust_cfa_offset -8
        popq    %rdi
        .cfi_adjust_cfa_offset -8
        testq   %rax, %rax
        je      3f
        jmp     *%rax
3:      ret                                     // no C library function: NULL
        .cfi_endproc
        .size   \name, .-\name
        .endm

// void* dlsym(void* handle, const char* name)
        LOOKUP_STUB dlsym, memtrace_real_dlsym, memtrace_resolve_dlsym, memtrace_dlsym_with_handle
// void* dlvsym(void* handle, const char* name, const char* version)
        LOOKUP_STUB dlvsym, memtrace_real_dlvsym, memtrace_resolve_dlvsym, memtrace_dlvsym_with_handle

#endif

        .section .note.GNU-stack,"",@progbits
