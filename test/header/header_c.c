/* SPDX-License-Identifier: MIT */
#include <string.h>
#include <weft.h>

#include "use.inc"

int main(void)
{
    return use_header();
}
