#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CSignetZlib
internal import SystemPackage
import SignetCore
import SignetCrypto
import SignetManifest
import SignetArchive

/// Deflates the large compressible resources of a package with a sync flush after every
/// 8,192 bytes of the file (FORMAT.md §2, `deflate`), so that a device can fetch and
/// inflate only the segments it lacks, while the entry stays one deflate stream any unzip
/// reads. Each file is read once, through the ledger's hashing and chunking source, and
/// deflated into a temporary file beside the output, which the package then copies as is.
final class SegmentedDeflate {
    private var paths: [String] = []
    private var tokens: [Int] = []
    private var made: [Int: (file: InputFile, compressedSize: UInt64, crc: UInt32)] = [:]
    private let ledger: PackLedger

    /// Deflates `indices` (at `level`) on every core, one file per worker at a time.
    init(ledger: PackLedger, indices: [Int], level: Int32, besides output: String) throws {
        self.ledger = ledger
        guard !indices.isEmpty else { return }
        for _ in indices {
            let path = TemporaryFiles.name(besides: output, tag: "deflate")
            tokens.append(TemporaryFiles.register(path))
            paths.append(path)
        }
        let jobs = indices.enumerated().map { (position, index) in (index: index, path: paths[position]) }
        /// A worker's result, handed back once its thread is done with it.
        struct Made: @unchecked Sendable {
            let value: (file: InputFile, compressedSize: UInt64, crc: UInt32, index: DeflateIndex)
        }
        let results = parallelMap(jobs) { job in
            Result { Made(value: try Self.deflate(ledger: ledger, index: job.index, level: level, into: job.path)) }
        }
        do {
            for (job, result) in zip(jobs, results) {
                let value = try result.get().value
                made[job.index] = (value.file, value.compressedSize, value.crc)
                ledger.record(value.index, at: job.index)
            }
        } catch {
            remove()
            throw error
        }
    }

    /// The deflate stream of input `index`, if it was made here.
    func source(for index: Int) -> ZipEntrySource? {
        guard let value = made[index] else { return nil }
        return RawDeflateSource(file: value.file, compressedSize: value.compressedSize, crc: value.crc, size: ledger.inputs[index].size)
    }

    /// Deletes the temporary files (the open descriptors stay readable until released).
    func remove() {
        for path in paths { unlink(path) }
        for token in tokens { TemporaryFiles.unregister(token) }
        tokens.removeAll()
    }

    /// One file: read through the ledger's source (hashed and chunked as it is read), deflated
    /// segment by segment into `path`.
    private static func deflate(ledger: PackLedger, index: Int, level: Int32, into path: String)
        throws -> (file: InputFile, compressedSize: UInt64, crc: UInt32, index: DeflateIndex)
    {
        let output: OwnedDescriptor
        do {
            output = try TemporaryFiles.guardedOpen(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        } catch let failure as SystemCallFailure {
            throw SignetError.posix(failure, "cannot create a temporary file beside", path: path)
        }
        let outputFD = output.descriptor
        guard let deflater = signet_deflater_new(level) else { throw SignetError(.io, "zlib could not start a deflate stream") }
        defer { signet_deflater_free(deflater) }
        let source = ResourceSource(ledger, index: index)
        try source.open()
        defer { try? source.close() }
        let segment = DeflateIndex.segmentSize
        let input = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 64)
        defer { input.deallocate() }
        let out = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 64)
        defer { out.deallocate() }
        var pending = 0, written: UInt64 = 0, segmentStart: UInt64 = 0, crc: UInt = 0
        var deflateIndex = DeflateIndex()
        var inSegment = 0
        func flushOut(force: Bool) throws {
            guard pending > 0, force || pending > out.count - 64 * 1024 else { return }
            try Self.writeAll(UnsafeRawBufferPointer(rebasing: out[0..<pending]), to: outputFD, path: path)
            written += UInt64(pending)
            pending = 0
        }
        /// Runs zlib over `bytes` with `mode` (0: none, 1: sync flush, 2: finish) until it has
        /// taken them all and, for a flush, written everything out.
        func run(_ bytes: UnsafeRawBufferPointer, mode: Int32) throws {
            var offset = 0
            while true {
                try flushOut(force: false)
                var consumed = 0, produced = 0
                let base = bytes.baseAddress.map { $0 + offset }?.assumingMemoryBound(to: UInt8.self)
                let result = signet_deflate(
                    deflater, base, bytes.count - offset, mode, &consumed,
                    (out.baseAddress! + pending).assumingMemoryBound(to: UInt8.self), out.count - pending, &produced)
                guard result >= 0 else { throw SignetError(.io, "zlib failed to deflate '\(ledger.inputs[index].diskPath)'") }
                offset += consumed
                pending += produced
                let room = out.count - pending
                if mode == 2 ? result == 1 : (offset == bytes.count && room > 0) { return }
            }
        }
        var finished = false
        while !finished {
            let n = try source.read(into: input)
            finished = n == 0
            var offset = 0
            while offset < n {
                let take = min(n - offset, segment - inSegment)
                let bytes = UnsafeRawBufferPointer(rebasing: input[offset..<(offset + take)])
                crc = signet_crc32(crc, bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), take)
                inSegment += take
                offset += take
                if inSegment == segment {
                    try run(bytes, mode: 1)
                    let end = written + UInt64(pending)
                    deflateIndex.append(compressedLength: Int(end - segmentStart))
                    segmentStart = end
                    inSegment = 0
                } else {
                    try run(bytes, mode: 0)
                }
            }
        }
        // The last (short) segment ends the stream: its compressed length runs to the end.
        try run(UnsafeRawBufferPointer(start: nil, count: 0), mode: 2)
        try flushOut(force: true)
        if inSegment > 0 {
            deflateIndex.append(compressedLength: Int(written - segmentStart))
        } else {
            // The file ends on a segment boundary: the final empty block belongs to the last one.
            deflateIndex.extendLast(by: Int(written - segmentStart))
        }
        let file = try InputFile.adopt(output, path: path, what: "temporary deflate stream")
        return (file, written, UInt32(truncatingIfNeeded: crc), deflateIndex)
    }

    private static func writeAll(_ bytes: UnsafeRawBufferPointer, to fd: FileDescriptor, path: String) throws {
        var offset = 0
        while offset < bytes.count {
            do {
                offset += try fd.write(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
            } catch {
                throw SignetError.posix(error, "cannot write the temporary file", path: path)
            }
        }
    }
}

/// A raw deflate stream in a file of its own, copied into the package as an entry's data.
final class RawDeflateSource: ZipEntrySource {
    private let file: InputFile
    private let uncompressedSize: UInt64
    let deflated: (compressedSize: UInt64, crc: UInt32)?
    private var position: UInt64 = 0

    init(file: InputFile, compressedSize: UInt64, crc: UInt32, size: UInt64) {
        self.file = file
        uncompressedSize = size
        deflated = (compressedSize, crc)
    }

    func size() throws -> UInt64 { uncompressedSize }

    func open() throws { position = 0 }

    func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        let count = Int(min(UInt64(buffer.count), (deflated?.compressedSize ?? 0) - position))
        guard count > 0 else { return 0 }
        let n = try file.read(fullyAt: Int64(position), into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<count]))
        guard n == count else { throw SignetError(.io, "the temporary file '\(file.path)' ended early", path: file.path) }
        position += UInt64(n)
        return n
    }

    func close() throws {}
}
