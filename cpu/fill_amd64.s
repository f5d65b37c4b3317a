#include "textflag.h"

// func ntRepeat(dst, src unsafe.Pointer, n, m int)
//
// Writes the m bytes at src over the n bytes at dst, n/m times, with
// 32-byte non-temporal stores (VMOVNTDQ, which needs dst 32-byte aligned),
// then SFENCE so that the stores are visible before whatever the caller
// does next (the job's done signal). m and n are multiples of 128.
TEXT ·ntRepeat(SB), NOSPLIT, $0-32
	MOVQ	dst+0(FP), DI
	MOVQ	src+8(FP), R8
	MOVQ	n+16(FP), BX
	MOVQ	m+24(FP), R9

block:
	MOVQ	R8, SI
	MOVQ	R9, CX

loop:
	VMOVDQU	0(SI), Y0
	VMOVDQU	32(SI), Y1
	VMOVDQU	64(SI), Y2
	VMOVDQU	96(SI), Y3
	VMOVNTDQ	Y0, 0(DI)
	VMOVNTDQ	Y1, 32(DI)
	VMOVNTDQ	Y2, 64(DI)
	VMOVNTDQ	Y3, 96(DI)
	ADDQ	$128, SI
	ADDQ	$128, DI
	SUBQ	$128, CX
	JNZ	loop
	SUBQ	R9, BX
	JNZ	block

	SFENCE
	VZEROUPPER
	RET
