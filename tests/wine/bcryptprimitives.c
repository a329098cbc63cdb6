/*
 * Test-only stand-in for Windows' bcryptprimitives.dll, which Wine 8 lacks.
 *
 * Rust's standard library on Windows draws its random numbers from ProcessPrng in bcryptprimitives.dll
 * (Windows 10 and later have it). Under Wine 8 the import cannot be resolved, so every Rust program and DLL
 * fails to load with "Can't find dependent libraries". This stand-in exports ProcessPrng and forwards it to
 * RtlGenRandom (SystemFunction036 in advapi32), which Wine does have. scripts/wine-env.sh builds it with
 * mingw-w64 and installs it into the test Wine prefix only; it is never shipped in the mod jar.
 */
#include <windows.h>

typedef BOOLEAN(WINAPI *RtlGenRandomFn)(PVOID buffer, ULONG length);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
    static RtlGenRandomFn gen;
    if (gen == NULL) {
        HMODULE advapi = LoadLibraryA("advapi32.dll");
        if (advapi == NULL) {
            return FALSE;
        }
        gen = (RtlGenRandomFn)(void *)GetProcAddress(advapi, "SystemFunction036");
        if (gen == NULL) {
            return FALSE;
        }
    }
    while (len > 0) {
        ULONG n = len > 0x40000000 ? 0x40000000 : (ULONG)len;
        if (!gen(data, n)) {
            return FALSE;
        }
        data += n;
        len -= n;
    }
    return TRUE;
}
