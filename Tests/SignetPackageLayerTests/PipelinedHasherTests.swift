import Foundation
import Testing
@testable import SignetCore
@testable import SignetCrypto
@testable import SignetManifest
@testable import SignetArchive
@testable import SignetNetwork
@testable import SignetPackage
import SignetTestSupport
import SignetCryptoTestSupport

@Suite("Hashing a large resource on the second core")
struct PipelinedHasherTests {
    @Test("the digests equal OpenSSL's one-shot digests, whatever the chunk sizes; a hasher dropped mid-way frees cleanly")
    func sameDigests() throws {
        let size = 9 * PipelinedHasher.bufferSize + 12_345 // more buffers than the pool, and a partial last one
        let bytes = [UInt8](try #require(FileHandle(forReadingAtPath: "/dev/urandom")).readData(ofLength: size))
        #expect(bytes.count == size)
        for chunk in [1, 4_095, 65_536, PipelinedHasher.bufferSize, 3 * PipelinedHasher.bufferSize + 7] {
            let hasher = try PipelinedHasher([.sha256, .sha512])
            bytes.withUnsafeBytes { all in
                var offset = 0
                while offset < all.count {
                    let end = min(all.count, offset + chunk)
                    hasher.update(UnsafeRawBufferPointer(rebasing: all[offset..<end]))
                    offset = end
                }
            }
            let digests = try hasher.finalize()
            #expect(digests[0] == (try Digest.compute(bytes, algorithm: .sha256)), "chunks of \(chunk)")
            #expect(digests[1] == (try Digest.compute(bytes, algorithm: .sha512)), "chunks of \(chunk)")
        }
        // Abandoned after a few buffers (a read that failed): deinit waits for the second core.
        let abandoned = try PipelinedHasher([.sha256])
        bytes.withUnsafeBytes { abandoned.update(UnsafeRawBufferPointer(rebasing: $0[0..<(5 * PipelinedHasher.bufferSize)])) }
    }
}
