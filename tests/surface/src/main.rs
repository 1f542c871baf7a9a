//! Each line reaches a cudarc handle through which safe code could use one of the library's
//! buffers on a second stream, unordered; each must be private to a user of the library.

fn main() {
    let gpu = flashrs::Gpu::open(0).unwrap();
    let _stream = gpu.stream();
    let _context = gpu.context();
    let _buffer = gpu.upload(&[0u16; 4]);
}

#[allow(dead_code)]
fn tensors(t: &flashrs::Tensors, v: &flashrs::VarlenTensors, p: &flashrs::PagedTensors, f: &flashrs::Fp8Tensors) {
    let _ = (t.q(), t.k(), t.v(), t.out(), t.lse(), t.stream());
    let _ = (v.out(), v.lse(), p.out(), p.lse(), f.out(), f.lse());
}
