/* SPDX-License-Identifier: MIT */
#include <string.h>
#include <weft.h>

#include "use.inc"

int main()
{
    return use_header();
}
