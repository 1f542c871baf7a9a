//! Any dims, strides and addresses of q, k, v and the output given to `check_views` (what
//! `attention_raw`, the Python op and the candle op check before a launch) are accepted or
//! refused in one line, never a panic; when accepted, every element the inputs' strides reach
//! lies in the span the library then lends the kernels (`Strides::extent`), the output is
//! contiguous with q's dims and v's head dim, and overlaps no input.
#![no_main]

use flashrs::api::{check_views, f16, RawOptions, TensorView};
use flashrs::Strides;
use libfuzzer_sys::fuzz_target;

/// Reads the next `n` bytes as a little-endian number (0 past the end).
fn take(bytes: &mut &[u8], n: usize) -> u64 {
    let (head, rest) = bytes.split_at(n.min(bytes.len()));
    *bytes = rest;
    head.iter().rev().fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
}

fuzz_target!(|data: &[u8]| {
    let mut bytes = data;
    let mut views = Vec::new();
    for _ in 0..4 {
        // Small dims (head dims: the compiled ones, ones the sm_90 forward pads, ones no kernel
        // takes), strides of any size.
        let dims = [
            take(&mut bytes, 1) as usize % 5,
            take(&mut bytes, 1) as usize % 9,
            take(&mut bytes, 2) as usize % 700,
            [64, 128, 256, 96, 0, 8, 192, 100, 264][take(&mut bytes, 1) as usize % 9],
        ];
        let strides = Strides([0, 1, 2, 3].map(|_| take(&mut bytes, 3) as usize));
        let ptr = take(&mut bytes, 6) & !0xf;
        views.push((ptr, dims, strides));
    }
    // Safety: views are only read by the checks, never dereferenced.
    let [q, k, v, out] = [0, 1, 2, 3].map(|i| unsafe { TensorView::<f16>::from_strided(views[i].0, views[i].1, views[i].2) });
    let causal = take(&mut bytes, 1) & 1 == 1;
    let options = RawOptions {
        causal,
        ..RawOptions::default()
    };
    match check_views(&q, &k, &v, Some(&out), None, options) {
        Ok(shape) => {
            // A head dim is accepted only where some kernel runs it, compiled or padded.
            assert!(flashrs::problem::kernel_head_dim(shape.head_dim).is_some(), "{shape}");
            for view in [&q, &k, &v] {
                let extent = view.strides().extent(view.dims()).expect("an accepted view's extent fits");
                // The last element any copy of the view reads is inside its extent.
                let last: usize = (0..4).map(|axis| (view.dims()[axis] - 1) * view.strides().0[axis]).sum();
                assert!(last < extent, "{view:?}");
                assert_eq!(view.strides().0[3], 1, "{view:?}");
            }
            assert!(out.is_contiguous(), "{out:?}");
            // q's dims with v's head dim, which is q's or a smaller multiple of 8.
            assert_eq!(out.dims(), shape.out_dims());
            assert_eq!(v.dims()[3], shape.head_dim_v);
            let dv = shape.head_dim_v;
            assert!(dv == shape.head_dim || (dv % 8 == 0 && dv > 0 && dv < shape.head_dim), "{shape}");
            let span = |view: &TensorView<'_, f16>| {
                let start = view.ptr() as u128;
                (start, start + 2 * view.strides().extent(view.dims()).unwrap() as u128)
            };
            let (out_start, out_end) = span(&out);
            for input in [&q, &k, &v] {
                let (start, end) = span(input);
                assert!(out_end <= start || end <= out_start, "the output overlaps {input:?}");
            }
        }
        Err(error) => {
            let message = error.to_string();
            assert_eq!(message.lines().count(), 1, "{message:?}");
        }
    }
});
