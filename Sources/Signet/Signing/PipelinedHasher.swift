import Foundation

/// Digests computed on the second core while the caller reads, checks and writes the same
/// bytes on the first: for a large resource, unpack's one thread otherwise spends 40% of its
/// time in SHA-256 beside libzip's CRC-32 and the copies to and from the kernel (`perf` of a
/// 256 MiB stored package; issue 28). The bytes are copied into one of four 1 MiB buffers and
/// hashed in order; the caller waits only when all four are queued. Memory: 4 MiB, whatever
/// the size of the resource.
final class PipelinedHasher: @unchecked Sendable {
    /// Resources from this size on are hashed this way; smaller ones are not worth a hand-off.
    static let threshold: UInt64 = 8 << 20
    static let bufferSize = 1 << 20
    static let bufferCount = 4

    private let hashers: [Digest.Hasher]
    private let queue = DispatchQueue(label: "signet.pipelined-hash")
    private let slots = DispatchSemaphore(value: PipelinedHasher.bufferCount)
    private let lock = NSLock()
    /// Buffers not being filled or hashed (under `lock`).
    private var idle: [UnsafeMutableRawBufferPointer] = []
    private var all: [UnsafeMutableRawBufferPointer] = []
    /// The buffer being filled by the caller, and how much of it is.
    private var current: UnsafeMutableRawBufferPointer?
    private var filled = 0

    init(_ algorithms: [DigestAlgorithm]) throws {
        hashers = try algorithms.map { try Digest.Hasher($0) }
    }

    deinit {
        queue.sync {}   // nothing may still read a buffer freed below
        for buffer in all { buffer.deallocate() }
    }

    /// Copies `chunk` into the buffers, handing each full one to the second core.
    func update(_ chunk: UnsafeRawBufferPointer) {
        var offset = 0
        while offset < chunk.count {
            let buffer = current ?? takeBuffer()
            current = buffer
            let count = min(chunk.count - offset, Self.bufferSize - filled)
            (buffer.baseAddress! + filled).copyMemory(from: chunk.baseAddress! + offset, byteCount: count)
            filled += count
            offset += count
            if filled == Self.bufferSize { handOver() }
        }
    }

    /// Waits for every byte to be hashed; the digests, in the order of the algorithms given.
    func finalize() throws -> [Digest] {
        handOver()
        queue.sync {}
        return try hashers.map { try $0.finalize() }
    }

    private func takeBuffer() -> UnsafeMutableRawBufferPointer {
        slots.wait()
        lock.lock()
        defer { lock.unlock() }
        if let buffer = idle.popLast() { return buffer }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.bufferSize, alignment: 64)
        all.append(buffer)
        return buffer
    }

    /// A full buffer on its way to the second core, which alone touches it until it is idle again.
    private struct Handed: @unchecked Sendable {
        let buffer: UnsafeMutableRawBufferPointer
    }

    private func handOver() {
        guard let buffer = current else { return }
        let count = filled
        current = nil
        filled = 0
        let handed = Handed(buffer: buffer)
        queue.async { [self] in
            let buffer = handed.buffer
            let bytes = UnsafeRawBufferPointer(rebasing: buffer[0..<count])
            for hasher in hashers { hasher.update(bytes) }
            lock.lock()
            idle.append(buffer)
            lock.unlock()
            slots.signal()
        }
    }
}
