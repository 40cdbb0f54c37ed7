#!/bin/sh
# Input JSON arrives on stdin; the output is the same document, upper-cased.
tr '[:lower:]' '[:upper:]'
echo
