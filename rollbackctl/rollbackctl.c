/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * rollbackctl: snapshots of the root volume that can be reverted.
 * The verbs are being built (see README.md); this is the frame they go in.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "macro.h"

#define EXIT_USAGE 2

struct verb {
        const char *name;
        const char *summary;
        int (*run)(int argc, char *argv[]);
};

static int help(void) {
        printf("Usage: rollbackctl [OPTIONS] COMMAND ...\n"
               "\n"
               "Snapshots of the root volume that can be reverted at the next boot.\n"
               "\n"
               "Options:\n"
               "  -h --help       Show this help\n"
               "     --version    Show the version\n");
        return 0;
}

static int verb_help(int argc, char *argv[]) {
        return help();
}

static const struct verb verbs[] = {
        { "help", "Show this help", verb_help },
};

int main(int argc, char *argv[]) {
        static const struct option options[] = {
                { "help",    no_argument, NULL, 'h' },
                { "version", no_argument, NULL, 'V' },
                {}
        };
        int c;

        log_set_program("rollbackctl");
        while ((c = getopt_long(argc, argv, "+h", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        return help();
                case 'V':
                        printf("rollbackctl %s\n", PROJECT_VERSION);
                        return 0;
                default:
                        return EXIT_USAGE;
                }

        if (optind >= argc) {
                log_error("missing command; see 'rollbackctl --help'");
                return EXIT_USAGE;
        }
        for (size_t i = 0; i < ELEMENTSOF(verbs); i++)
                if (strcmp(verbs[i].name, argv[optind]) == 0)
                        return verbs[i].run(argc - optind, argv + optind);
        log_error("unknown command '%s'; see 'rollbackctl --help'", argv[optind]);
        return EXIT_USAGE;
}
