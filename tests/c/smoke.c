/*
 * A small C program using libmoonbridge_client through its committed header: the NULL and invalid-handle
 * rules, the error text, and a real login through a MoonBridge proxy (argv[1] is the URL). Exit code 0 means
 * every check passed; any other code names the failed check.
 */
#include "moonbridge_client.h"

#include <stdio.h>
#include <string.h>

/* Case file HS (handshake for mc.example.com:25565 with the Forge marker) and LS (Login Start "Steve"). */
static const uint8_t HS[] = {0x19, 0x00, 0x05, 0x13, 'm', 'c', '.', 'e', 'x', 'a', 'm', 'p', 'l', 'e', '.',
                             'c', 'o', 'm', 0x00, 'F', 'M', 'L', 0x00, 0x63, 0xdd, 0x02};
static const uint8_t LS[] = {0x07, 0x00, 0x05, 'S', 't', 'e', 'v', 'e'};

static void print_error(const char *what) {
    char err[512];
    mb_last_error(err, sizeof err);
    fprintf(stderr, "%s: %s\n", what, err);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: smoke URL\n");
        return 2;
    }
    uint8_t buf[4096];
    char err[512];
    MbConnection *forged = (MbConnection *)(uintptr_t)0x1234;

    /* NULL and invalid handles are errors, never crashes. */
    if (mb_send(NULL, (const uint8_t *)"x", 1) != MB_ERR_INVALID_ARGUMENT) return 10;
    if (mb_end_tick(NULL) != MB_ERR_INVALID_ARGUMENT) return 11;
    if (mb_recv(NULL, buf, sizeof buf, 0) != MB_ERR_INVALID_ARGUMENT) return 12;
    if (mb_recv(forged, buf, sizeof buf, 0) != MB_ERR_INVALID_ARGUMENT) return 13;
    if (mb_last_error(err, sizeof err) == 0 || strstr(err, "handle") == NULL) return 14;
    mb_close(NULL);
    mb_close(forged);
    /* mb_last_error reports the full length and truncates safely. */
    size_t full = mb_last_error(NULL, 0);
    char tiny[4];
    if (mb_last_error(tiny, sizeof tiny) != full || tiny[3] != '\0') return 15;

    MbConnection *c = NULL;
    if (mb_connect("bogus", NULL, &c) != MB_ERR_INVALID_ARGUMENT || c != NULL) return 16;
    if (mb_connect(argv[1], NULL, NULL) != MB_ERR_INVALID_ARGUMENT) return 17;
    if (mb_connect(argv[1], "{\"coalesce\":\"sometimes\"}", &c) != MB_ERR_INVALID_ARGUMENT) return 18;

    /* A real login. */
    if (mb_connect(argv[1], "{\"coalesce\":\"tick\"}", &c) != MB_OK) {
        print_error("mb_connect");
        return 20;
    }
    if (mb_send(c, HS, sizeof HS) != MB_OK || mb_send(c, LS, sizeof LS) != MB_OK || mb_end_tick(c) != MB_OK) {
        print_error("mb_send");
        return 21;
    }
    size_t got = 0;
    while (got < 45) { /* Login Success for Steve is 45 bytes */
        int64_t r = mb_recv(c, buf + got, sizeof buf - got, 5000);
        if (r <= 0) {
            print_error("mb_recv");
            return 22;
        }
        got += (size_t)r;
    }
    if (buf[0] != 0x2c || buf[1] != 0x02) return 23;
    /* Nothing more arrives: a zero timeout returns 0 at once. */
    if (mb_recv(c, buf, sizeof buf, 0) != 0) return 24;
    printf("login ok: %zu bytes\n", got);
    mb_close(c);
    /* The handle is gone after mb_close. */
    if (mb_send(c, HS, 1) != MB_ERR_INVALID_ARGUMENT) return 25;
    return 0;
}
