/*
 * pbjson.h - print any protobuf-c message as JSON by walking its descriptor. Absent optional
 * fields are omitted (unknown stays unknown), enums print as their names, bytes as base64,
 * 64-bit integers as JSON numbers.
 */
#ifndef BUZZ_PBJSON_H
#define BUZZ_PBJSON_H

#include <stdio.h>

#include <protobuf-c/protobuf-c.h>

void pbjson_print(FILE *out, const ProtobufCMessage *msg);

#endif
